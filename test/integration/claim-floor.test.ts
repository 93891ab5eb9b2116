// Claim floors (sql/0030, issue 45): while an old snapshot is held, the rows already claimed stay
// in the due index in front of the live ones; a claim seeks past them from its shard's floor
// instead of walking them. And nothing is skipped for good: a row that becomes visible or pending
// below a floor (a writer that commits late, a due time in the past, a reschedule to the past) is
// claimed at a later tick.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ClaimFloors } from '../../src/coordinator/claim-floors.js';
import { sql } from '../../src/db/queries.js';
import { dueIndexRead } from '../helpers/due-index-read.js';
import { waitHorizonPast } from '../helpers/horizon.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string>;
let runner: CliProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase('claim_floor');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  const config = writeConfig({
    redisKeyPrefix: testKeyPrefix('claim-floor'),
    kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } } },
  });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config };
  expect((await runCli(['migrate'], env)).code).toBe(0);
});

afterAll(async () => {
  await runner?.stop();
  await tearDown({ pool, db });
});

/** Orders [from, to], unpaid, each with its timeout due `dueSql` (an SQL expression). */
async function write(client: pg.Pool | pg.PoolClient, from: number, to: number, dueSql: string): Promise<void> {
  await client.query(
    `WITH o AS (INSERT INTO orders (id, status) SELECT i, 'unpaid' FROM generate_series($1::bigint, $2::bigint) i RETURNING id)
     INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $3, id::text, ${dueSql} FROM o`,
    [from, to, KIND],
  );
}

async function waitClosed(ids: number[], ms: number): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM orders WHERE id = ANY($1) AND status <> 'closed'", [ids]);
    if (rows[0]!.n === 0 || Date.now() > deadline) return rows[0]!.n;
    await new Promise((r) => setTimeout(r, 100));
  }
}

it('claims seek past the rows a held snapshot keeps, and skip nothing for good', { timeout: 120_000 }, async () => {
  runner = spawnCli('run', ['run'], env);
  await runner.waitForMsg('became leader', 20_000);
  // An old snapshot, held from here on: nothing the center deletes after this can be vacuumed.
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT 1 FROM orders LIMIT 1');
  try {
    // 60,000 timeouts claimed and moved to the history: dead, and not removable.
    await write(pool, 1, 60_000, 'now()');
    expect(await waitClosed([60_000], 60_000)).toBe(0);
    await pool.query('VACUUM timeout_center.timeouts'); // removes nothing under the snapshot

    // A trickle keeps the floors moving while the cases below are written.
    let trickle = 100_000;
    let trickling = true;
    const trickler = (async () => {
      while (trickling) {
        await write(pool, trickle, trickle, "now() + interval '200 ms'");
        trickle += 1;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    // (a) A writer whose transaction commits seconds after it wrote a row due at once.
    const slow = await pool.connect();
    await slow.query('BEGIN');
    await write(slow, 200_001, 200_001, "clock_timestamp() + interval '100 ms'");
    await new Promise((r) => setTimeout(r, 3000));
    await slow.query('COMMIT');
    slow.release();
    // (b) A due time an hour in the past. (c) A timeout due in a day, rescheduled to the past.
    await write(pool, 200_002, 200_002, "now() - interval '1 hour'");
    await write(pool, 200_003, 200_003, "now() + interval '1 day'");
    await pool.query("UPDATE timeout_center.timeouts SET due_at = now() - interval '5 minutes' WHERE biz_id = '200003'");
    // (d) due_at = now() (the transaction's start) in a transaction that wrote it 2 s later.
    const late = await pool.connect();
    await late.query('BEGIN');
    await late.query('SELECT pg_sleep(2)');
    await write(late, 200_004, 200_004, 'now()');
    await late.query('COMMIT');
    late.release();
    // (e) A due time an hour in the past, in a transaction that commits 3 s later: ticks ran while it
    // was open, and the late probe reads only what was written late since the tick before
    // (sql/0054): by the writer's transaction id, not by when the row was written.
    const longLate = await pool.connect();
    await longLate.query('BEGIN');
    await write(longLate, 200_005, 200_005, "now() - interval '1 hour'");
    await new Promise((r) => setTimeout(r, 3000));
    await longLate.query('COMMIT');
    longLate.release();
    // (f) The same by a writer that recorded no transaction id: code before sql/0054, whose
    // transaction began before the migration and commits after it.
    const oldWriter = await pool.connect();
    await oldWriter.query('BEGIN');
    await write(oldWriter, 200_006, 200_006, "now() - interval '1 hour'");
    await oldWriter.query("UPDATE timeout_center.timeouts SET written_xid = NULL WHERE biz_id = '200006'");
    await new Promise((r) => setTimeout(r, 3000));
    await oldWriter.query('COMMIT');
    oldWriter.release();
    expect(await waitClosed([200_001, 200_002, 200_003, 200_004, 200_005, 200_006], 20_000)).toBe(0);
    trickling = false;
    await trickler;

    // The claim of a shard written with the floor, against pending rows behind the 60,000 dead
    // ones: its index scan starts at the shard's floor.
    await runner.stop();
    runner = undefined;
    // 5,000 due, a claim of 500 of them (a claim limit below what is due, as in production; a
    // claim of every due row of a tiny table may be planned as a scan of the table instead, which
    // the planner cannot tell reads the dead rows too: docs/vacuum-horizon.md "Known limits").
    await write(pool, 300_001, 305_000, 'now()');
    // and 20,000 due tomorrow: most live rows are not due, as under a steady stream
    await write(pool, 400_001, 420_000, "now() + interval '1 day'");
    // Statistics, as autovacuum keeps them: on a table never analyzed the planner guesses one row
    // for every path and may take any index of the kind, then sort.
    await pool.query('ANALYZE timeout_center.timeouts');
    // The coordinator stamps each shard it writes with its kind's floor.
    const { rows: last } = await pool.query<{ claim_floor: Date | null }>('SELECT claim_floor FROM timeout_center.shards ORDER BY id DESC LIMIT 1');
    expect(last[0]!.claim_floor).not.toBeNull();
    // The floor next_due computes now, tick by tick as the coordinator's. It passes the dead rows
    // once every transaction older than its last mark has ended, anywhere in the cluster (a test
    // file beside this one may hold one: the floor then stays lower, which is safe): wait for that,
    // so that what is measured below is the floor, not the neighbours.
    const floors = new ClaimFloors();
    for (let tick = 0; tick < 2; tick++) {
      const { rows } = await pool.query(sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() }));
      floors.update(rows[0]);
      await waitHorizonPast(pool, rows[0].mark_xid);
    }
    const floor = floors.floorOf(KIND)!;
    // A shard written with it, as plan_shards writes one.
    const { rows: shard } = await pool.query<{ id: number }>(
      `WITH scan AS (INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', now(), 'mapped') RETURNING id)
       INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, claim_floor, claim_floor_id)
       SELECT id, $1, 0, 0, 500, $2::timestamptz, $3::bigint FROM scan RETURNING id`,
      [KIND, floor[0], floor[1]],
    );
    const claim = sql('worker/claim', { shardId: shard[0]!.id, kind: KIND, claimLimit: 500, batch: false });
    // From the start, past 60,000 dead entries; from the floor: its 500.
    const read = await dueIndexRead(pool, claim.text, claim.values);
    expect(read.entries).toBeGreaterThanOrEqual(500);
    expect(read.entries).toBeLessThan(600);
    // The same shard run again after its worker died: before applying anything it pins the rows it
    // will hold (pin.sql), from the shard's floor as well, not from the kind's first entry.
    const { rows: rerun } = await pool.query<{ lease_token: string }>(
      `UPDATE timeout_center.shards SET state = 'running', lease_token = gen_random_uuid(), attempts = 2, claim_attempt = 1
        WHERE id = $1 RETURNING lease_token::text`,
      [shard[0]!.id],
    );
    const pin = sql('worker/pin', { shardId: shard[0]!.id, kind: KIND, claimLimit: 500, leaseToken: rerun[0]!.lease_token });
    const pinned = await dueIndexRead(pool, pin.text, pin.values);
    expect(pinned.entries, 'entries of the due index the pin read').toBeGreaterThanOrEqual(500);
    expect(pinned.entries, 'entries of the due index the pin read').toBeLessThan(600);
    await pool.query("UPDATE timeout_center.shards SET state = 'done' WHERE id = $1", [shard[0]!.id]);

    // The lag monitor's count of the due rows, from the floor next_due computes: with the kind and
    // the floor as constants the planner takes the due index from the floor, not an index led by
    // the kind that holds every version the snapshot keeps (backlog.sql).
    const backlog = sql('coordinator/backlog', { kind: KIND, floorAt: floor[0], floorId: floor[1], shardsFrom: floors.shardsFrom() });
    const { rows: counted } = await pool.query(backlog);
    // the 5,000, and what the trickle left when the runner stopped
    expect(Number(counted[0].pending_due)).toBeGreaterThanOrEqual(5000);
    expect(Number(counted[0].pending_due)).toBeLessThan(5010);
    const { rows: plan } = await pool.query({ ...backlog, text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${backlog.text}` });
    const top = (plan[0]['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan;
    // From the floor: the 5,000 rows due; from the start of an index led by the kind, 85,000 entries
    // and their heap pages. (The plan the bench met 21 minutes into a held snapshot, which
    // backlog.sql describes, is coordinator-plans.test.ts's; this holds the statement to the floor.)
    expect(top['Shared Hit Blocks']! + top['Shared Read Blocks']!).toBeLessThan(400);
  } finally {
    await holder.end();
  }
});
