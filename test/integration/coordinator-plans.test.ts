// The coordinator's reads of pending timeouts do not depend on the row estimate (issue 45). Under
// an old snapshot held for twenty minutes, the first coordinator statement planned after each of
// autovacuum's passes (statistics then saying the table holds a row or two, among millions of
// index entries the snapshot keeps) read timeouts_one_live_per_biz by the kind alone, a bitmap
// scan planned for one row that returned every entry (4.3-4.8 million, 0.7-1.8 s), for the 2,000
// rows it wanted: once a minute, each tick's statements stalled (docs/vacuum-horizon-figures.md,
// "One hour, the claim planned by itself"). Here the same statistics (autovacuum off on the table,
// 300,000 dead rows in every index, kept by a report's snapshot, the planner told the table holds
// one row) and every statement of a tick that reads pending timeouts: each reads about the live
// rows it needs, never the dead. The dead rows are due tomorrow, as rows cancelled before their due
// time are: a probe that looks ahead of now must stop before them (CI found next_after walking them
// for a kind with nothing ahead).
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql } from '../../src/db/queries.js';
import { timeoutsIndexEntriesRead } from '../helpers/due-index-read.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
/** A kind routed over two business databases: the map counts its due rows per target. */
const ROUTED = 'order.unshipped';
/** A kind with nothing pending: every row it had was cancelled before its due time. */
const IDLE = 'order.unreviewed';
const DEAD = 300_000;
/** The stream: due over the last two seconds, and due over the next minute. */
const DUE = 2_000;
const AHEAD = 1_000;
let db: TestDatabase;
let pool: pg.Pool;
/** A report's snapshot, held from before the dead rows were deleted to the end: without it the
 *  first statement to pass their index entries marks them dead and later ones skip them, unless a
 *  neighbour's transaction happens to hold the horizon (how CI found the unbounded next-due probe). */
let report: pg.Client;
/** What next_due returned at a first tick: the inputs of the next one. */
let tick: { floors: string; marks: string; shardsFrom: number; scansFrom: number; server: string; lateFrom: string };

const total = (read: Record<string, number>) => Object.values(read).reduce((a, b) => a + b, 0);

beforeAll(async () => {
  db = await createTestDatabase('coordinator_plans');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  await createOrdersSchema(pool);
  const config = writeConfig({
    redisKeyPrefix: testKeyPrefix('coordinator-plans'),
    businessDatabases: { b0: { url: db.url }, b1: { url: db.url } },
    kinds: {
      [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } },
      [ROUTED]: { handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: ['b0', 'b1'] } } },
      [IDLE]: { handler: { type: 'sql', sql: CLOSE_SQL } },
    },
  });
  const migrated = await runCli(['migrate'], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config });
  expect(migrated.code, migrated.stderr).toBe(0);
  // Rows done since the snapshot began: dead, and still in every index (nothing vacuums them).
  await pool.query('ALTER TABLE timeout_center.timeouts SET (autovacuum_enabled = off)');
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT k, (1000000 + g)::text, now() + interval '1 day' FROM generate_series(1, $2::int) g, unnest($1::text[]) k`,
    [[KIND, ROUTED, IDLE], DEAD / 3],
  );
  report = new pg.Client({ connectionString: db.url });
  await report.connect();
  await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await report.query('SELECT count(*) FROM timeout_center.kinds');
  await pool.query('DELETE FROM timeout_center.timeouts');
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $1, 'due-' || g, now() - interval '2 seconds' + g * interval '1 millisecond' FROM generate_series(1, $2::int) g
     UNION ALL
     SELECT $1, 'ahead-' || g, now() + interval '1 minute' + g * interval '1 millisecond' FROM generate_series(1, $3::int) g
     UNION ALL
     SELECT $4, g::text, now() - interval '2 seconds' + g * interval '1 millisecond' FROM generate_series(1, $2::int) g`,
    [KIND, DUE, AHEAD, ROUTED],
  );
  await pool.query('ANALYZE timeout_center.timeouts');
  // The statistics autovacuum's pass left in the hour run: the planner expects a row or two.
  await pool.query("UPDATE pg_class SET reltuples = 1 WHERE oid = 'timeout_center.timeouts'::regclass");
  const { rows: estimate } = await pool.query<{ 'QUERY PLAN': { Plan: { 'Plan Rows': number } }[] }>(
    `EXPLAIN (FORMAT JSON) SELECT 1 FROM timeout_center.timeouts WHERE kind = '${KIND}' AND state = 'pending'`,
  );
  expect(estimate[0]!['QUERY PLAN'][0]!.Plan['Plan Rows'], 'the premise: the planner expects one row').toBe(1);

  // A first tick (no floors yet): its outputs are the next tick's inputs, as claim-floors.ts keeps them.
  const first = await pool.query<{
    floors: unknown;
    mark_at: string;
    mark_xid: string;
    xmin: string;
    in_flight_from: string;
    open_scans_from: string;
    server: string;
  }>(sql('coordinator/next_due', { kinds: [KIND, ROUTED, IDLE], floors: '{}', marks: '[]', shardsFrom: 0, scansFrom: 0, server: '', lateFrom: '' }));
  const r = first.rows[0]!;
  tick = {
    floors: JSON.stringify(r.floors),
    marks: JSON.stringify([{ at: r.mark_at, xid: r.mark_xid }]),
    shardsFrom: Number(r.in_flight_from),
    scansFrom: Number(r.open_scans_from),
    server: r.server,
    lateFrom: r.xmin,
  };
  expect(JSON.parse(tick.floors)[KIND], 'a floor at the first due row').toBeDefined();
}, 120_000);

afterAll(async () => {
  await report?.end().catch(() => {});
  await tearDown({ pool, db });
});

/** At most the due rows (a walk of them, back from now), the rows ahead once, and a few probes:
 *  every dead entry is 300,000. */
const FEW = DUE + AHEAD + 100;
/** The same for the three kinds: each kind's due rows, the first kind's rows ahead, a few probes
 *  (the third kind has none: its floor walk and its look ahead must read nothing of it). */
const FEW_ALL = 2 * DUE + AHEAD + 200;

it('next_due: its floor walk, ceilings, latest due, next after and has-due probes read the live rows, not the dead (nor a kind whose rows were all cancelled)', async () => {
  const read = await timeoutsIndexEntriesRead(pool, sql('coordinator/next_due', { kinds: [KIND, ROUTED, IDLE], ...tick }));
  expect({ total: total(read) <= FEW_ALL ? 'a few' : total(read) }, `entries read by index: ${JSON.stringify(read)}`).toEqual({ total: 'a few' });
});

it('plan_shards and count_ahead: the count of due rows reads them in key order, up to its bound (per target for a routed kind)', async () => {
  const floors = tick.floors;
  const cutoff = new Date();
  const plan = await timeoutsIndexEntriesRead(
    pool,
    sql('coordinator/plan_shards', {
      cutoff,
      kinds: [KIND, ROUTED],
      maxShards: 10,
      maxRows: 10_000,
      epoch: 1,
      coordinatorId: 'test',
      credit: '{}',
      rateBudget: '{}',
      targetBudget: '{}',
      notBefore: null,
      goneAfterMs: 15_000,
      floors,
      shardsFrom: tick.shardsFrom,
    }),
  );
  expect({ total: total(plan) <= FEW_ALL ? 'a few' : total(plan), plan }).toMatchObject({ total: 'a few' });
  expect(plan['timeouts_due_by_target'], 'the routed kind counted per target').toBeGreaterThanOrEqual(DUE);
  const ahead = await timeoutsIndexEntriesRead(
    pool,
    sql('coordinator/count_ahead', { kinds: [KIND], cutoff: new Date(Date.now() + 120_000), maxRows: 10_000, floors, shardsFrom: tick.shardsFrom }),
  );
  expect({ total: total(ahead) <= FEW ? 'a few' : total(ahead), ahead }).toMatchObject({ total: 'a few' });
});

it('abandon_shards with no shard to abandon reads no timeout at all', async () => {
  const read = await timeoutsIndexEntriesRead(pool, sql('coordinator/abandon_shards', { maxShards: 100, shardsFrom: tick.shardsFrom }));
  expect(read).toEqual({});
});

it('backlog: the lag monitor counts the due rows from the floor', async () => {
  const [at, id] = JSON.parse(tick.floors)[KIND] as [string, string];
  const read = await timeoutsIndexEntriesRead(pool, sql('coordinator/backlog', { kind: KIND, floorAt: at, floorId: id, shardsFrom: tick.shardsFrom }));
  expect({ total: total(read) <= FEW ? 'a few' : total(read), read }).toMatchObject({ total: 'a few' });
});
