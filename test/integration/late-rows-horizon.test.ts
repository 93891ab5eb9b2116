// Rows written late, under a held snapshot (issue 45, docs/vacuum-horizon.md): a row written pending
// more than a second after its due time (a due time in the past, a reschedule to the past, a row
// handed back) can be due before any floor, so every tick probes for them apart. The probe read
// timeouts_written_late from the kind's start: while a snapshot was held, every such row claimed
// since stayed in front of it, and a workload that writes most of its timeouts already due paid for
// all of them at every tick (3 million: 420-480 ms a tick). A row the previous tick saw is covered by
// its floor; only the rows written since need the probe, and they are found by who wrote them.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ClaimFloors } from '../../src/coordinator/claim-floors.js';
import { sql } from '../../src/db/queries.js';
import { timeoutsIndexEntriesRead } from '../helpers/due-index-read.js';
import { waitHorizonPast } from '../helpers/horizon.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
/** Rows written an hour late and claimed while the snapshot is held. */
const CLAIMED_LATE = 100_000;
let db: TestDatabase;
let pool: pg.Pool;
let holder: pg.Client;

beforeAll(async () => {
  db = await createTestDatabase('late_rows_horizon');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  const config = writeConfig({
    redisKeyPrefix: testKeyPrefix('late-rows-horizon'),
    kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } } },
  });
  const migrated = await runCli(['migrate'], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config });
  expect(migrated.code, migrated.stderr).toBe(0);
  // An old snapshot, held from here on: nothing deleted after this can be vacuumed, nor its index
  // entries marked dead by a scan that passes them.
  holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT 1 FROM timeout_center.kinds LIMIT 1');
}, 120_000);

afterAll(async () => {
  await holder?.end().catch(() => {});
  await tearDown({ pool, db });
});

it('the next tick reads the rows written late since the last one, not every one claimed under the snapshot', { timeout: 120_000 }, async () => {
  // Written an hour late, then claimed (deleted, as a claim's DELETE leaves them): dead, and kept.
  const { rows: w } = await pool.query<{ xid: string }>(
    `WITH ins AS (INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
                  SELECT $1, 'late-' || g, now() - interval '1 hour' + g * interval '1 millisecond' FROM generate_series(1, $2::int) g
                  RETURNING 1)
     SELECT pg_current_xact_id()::text AS xid FROM (SELECT count(*) FROM ins) x`,
    [KIND, CLAIMED_LATE],
  );
  const { rows: lateCount } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE kind = $1 AND written_late AND state = 'pending'",
    [KIND],
  );
  expect(lateCount[0]!.n, 'the premise: every row written late').toBe(CLAIMED_LATE);
  await pool.query("DELETE FROM timeout_center.timeouts WHERE biz_id LIKE 'late-%'");
  // A stream's live rows: some due, some ahead.
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $1, 'live-' || g, clock_timestamp() + g * interval '10 milliseconds' FROM generate_series(1, 500) g`,
    [KIND],
  );
  await waitHorizonPast(pool, w[0]!.xid);

  // Two ticks: the first reads every kind from its start (no floor yet); the second from the
  // first's floor, or from a second before the first's mark once every transaction older than that
  // mark has ended (the marks, sql/0030).
  const floors = new ClaimFloors();
  for (let tick = 0; tick < 2; tick++) {
    const { rows } = await pool.query(sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() }));
    floors.update(rows[0]);
    await waitHorizonPast(pool, rows[0].mark_xid);
  }
  // Rows written late since that tick: found by the next one.
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $1, 'later-' || g, now() - interval '10 seconds' + g * interval '1 millisecond' FROM generate_series(1, 10) g`,
    [KIND],
  );
  const second = sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() });
  const read = await timeoutsIndexEntriesRead(pool, second);
  const total = Object.values(read).reduce((a, b) => a + b, 0);
  expect({ total: total < 1_000 ? 'a few' : total, read }).toEqual({ total: 'a few', read });
  const { rows } = await pool.query(second);
  const [floorAt] = rows[0].floors[KIND] as [string, string];
  const { rows: below } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE biz_id LIKE 'later-%' AND available_at < $1::timestamptz",
    [floorAt],
  );
  expect(below[0]!.n, 'rows written late since the last tick below the new floor').toBe(0);
});
