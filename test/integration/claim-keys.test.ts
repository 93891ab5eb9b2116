// Claim floors as keys (sql/0041, issue 45): a flood's rows share one due instant, so a floor that
// is a time cannot pass the ones already claimed while the flood drains, and under an old snapshot
// held elsewhere every claim walked them (dead, not removable). The floor is a key (available_at,
// id); the shards waiting take each tick's floor, and those claiming newest first a ceiling, so a
// claim reads from where the claims before it ended, at either end of the flood. Nothing is
// skipped: the center then drains what is left, under the same snapshot.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql, statement } from '../../src/db/queries.js';
import { ClaimFloors } from '../../src/coordinator/claim-floors.js';
import { composeClaim } from '../../src/worker/sql-handler.js';
import { dueIndexRead } from '../helpers/due-index-read.js';
import { waitHorizonPast } from '../helpers/horizon.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
const FLOOD = 60_000;
let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string>;
let runner: CliProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase('claim_keys');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  const config = writeConfig({
    redisKeyPrefix: testKeyPrefix('claim-keys'),
    kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } } },
  });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config };
  expect((await runCli(['migrate'], env)).code).toBe(0);
});

afterAll(async () => {
  await runner?.stop();
  await tearDown({ pool, db });
});

it('a flood due at one instant: floors and ceilings pass its rows already claimed, and nothing is skipped', { timeout: 120_000 }, async () => {
  // The flood: 60,000 orders, each timeout due at the same instant, a few seconds ahead (not late).
  const { rows: at } = await pool.query<{ t: string; ms: number }>(
    "SELECT t::text, extract(epoch FROM t)::float8 * 1000 AS ms FROM (SELECT date_trunc('second', now()) + interval '3 seconds' AS t) x",
  );
  const instant = at[0]!.t;
  await pool.query(
    `WITH o AS (INSERT INTO orders (id, status) SELECT i, 'unpaid' FROM generate_series(1, $1::bigint) i RETURNING id)
     INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $2, id::text, $3::timestamptz FROM o`,
    [FLOOD, KIND, instant],
  );
  const { rows: ids } = await pool.query<{ lo: string; hi: string }>('SELECT min(id)::text AS lo, max(id)::text AS hi FROM timeout_center.timeouts');
  const lo = BigInt(ids[0]!.lo);
  const hi = BigInt(ids[0]!.hi);
  // Two shards of it mapped ahead, as plan_shards writes them: seq 0 claims oldest first, seq 1
  // (take_lease.sql from_newest) newest first; their floor from before the instant.
  const { rows: scan } = await pool.query<{ id: string }>(
    "INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', $1, 'mapped') RETURNING id",
    [instant],
  );
  const { rows: shards } = await pool.query<{ id: string }>(
    `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, not_before, claim_floor)
     SELECT $1, $2, s, 0, 500, $3, '-infinity' FROM generate_series(0, 1) s ORDER BY s RETURNING id`,
    [scan[0]!.id, KIND, instant],
  );
  const [oldest, newest] = shards.map((s) => Number(s.id)) as [number, number];
  await new Promise((r) => setTimeout(r, 4500)); // the instant has passed

  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT 1 FROM orders LIMIT 1');
  try {
    // Earlier shards of the flood took 20,000 rows at each end: dead, and not removable.
    await pool.query('DELETE FROM timeout_center.timeouts WHERE id < $1 OR id > $2', [String(lo + 20_000n), String(hi - 20_000n)]);
    // VACUUM removes nothing under the snapshot; ANALYZE: statistics, as autovacuum keeps them (on
    // a table never analyzed the planner guesses one row for every path and may take any index).
    await pool.query('VACUUM ANALYZE timeout_center.timeouts');

    // Two ticks of the coordinator's next_due: the first leaves a mark, the second's floor
    // passes the instant's claimed rows; both refresh the shards waiting. The second reads past
    // them once every transaction older than the mark has ended, anywhere in the cluster (a test
    // file beside this one may hold one: the floor then stays lower, which is safe): wait for that.
    const floors = new ClaimFloors();
    for (let tick = 0; tick < 2; tick++) {
      const { rows } = await pool.query(sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() }));
      floors.update(rows[0]);
      await waitHorizonPast(pool, rows[0].mark_xid);
      await new Promise((r) => setTimeout(r, 1100));
    }
    const [floorAt, floorId] = floors.floorOf(KIND)!;
    expect(new Date(floorAt).getTime()).toBe(at[0]!.ms);
    expect(floorId).toBe(String(lo + 20_000n));
    const { rows: refreshed } = await pool.query(
      'SELECT id::int, claim_floor_id::text, claim_ceiling_id::text FROM timeout_center.shards WHERE id = ANY($1) ORDER BY id',
      [[oldest, newest]],
    );
    expect(refreshed).toEqual([
      { id: oldest, claim_floor_id: String(lo + 20_000n), claim_ceiling_id: null },
      { id: newest, claim_floor_id: String(lo + 20_000n), claim_ceiling_id: String(hi - 20_000n) },
    ]);

    // Each end's claim reads its 500 entries of the due index; from the instant's first (or last)
    // entry it would walk 20,000 dead ones.
    const plain = statement('worker/claim');
    const newestFirst = composeClaim({ claimOrder: 'newest' });
    const first = await dueIndexRead(pool, plain, [oldest, KIND, 500, false]);
    expect(first.entries).toBeGreaterThanOrEqual(500);
    expect(first.entries).toBeLessThan(600);
    const last = await dueIndexRead(pool, newestFirst, [newest, KIND, 500, false]);
    expect(last.entries).toBeGreaterThanOrEqual(500);
    expect(last.entries).toBeLessThan(600);
    // Without the keys (the shards' floor and ceiling set back to the instant) the same claims
    // walk the dead entries: the figures above are the keys', not a small table's.
    await pool.query('UPDATE timeout_center.shards SET claim_floor_id = NULL, claim_ceiling = NULL, claim_ceiling_id = NULL WHERE id = ANY($1)', [
      [oldest, newest],
    ]);
    expect((await dueIndexRead(pool, plain, [oldest, KIND, 500, false])).entries).toBeGreaterThan(20_000);
    expect((await dueIndexRead(pool, newestFirst, [newest, KIND, 500, false])).entries).toBeGreaterThan(20_000);

    // The center drains the rest of the flood under the same snapshot: every order whose timeout
    // was not taken above is closed.
    const { rows: left } = await pool.query<{ ids: string[] }>('SELECT array_agg(biz_id) AS ids FROM timeout_center.timeouts');
    expect(left[0]!.ids).toHaveLength(FLOOD - 40_000);
    runner = spawnCli('run', ['run'], env);
    await runner.waitForMsg('became leader', 20_000);
    const deadline = Date.now() + 60_000;
    let open = -1;
    while (Date.now() < deadline) {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM orders WHERE id::text = ANY($1) AND status <> 'closed'", [left[0]!.ids]);
      open = rows[0]!.n;
      if (open === 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(open).toBe(0);
  } finally {
    await holder.end();
  }
});
