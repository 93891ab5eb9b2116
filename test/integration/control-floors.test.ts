// The control tables under an old snapshot (issue 45): every shard and scan the coordinator writes
// passes through states that an index keeps (shards_in_flight_by_id, scans_open), and while a
// snapshot is held elsewhere none of those versions can be removed. The map's next_due.sql and the
// reduce ran at every tick over all of them (1,475 buffers per tick twelve minutes into a held
// snapshot at 2,000 timeouts/s). They now read from the oldest shard in flight and scan not
// reduced that the previous tick saw (claim-floors.ts), and still find what is in flight.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql, type BoundStatement } from '../../src/db/queries.js';
import { ClaimFloors } from '../../src/coordinator/claim-floors.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
const TICKS = 3_000;
let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase('control_floors');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  const config = writeConfig({ redisKeyPrefix: testKeyPrefix('control-floors'), kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } } } });
  expect((await runCli(['migrate'], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config })).code).toBe(0);
});

afterAll(async () => {
  await tearDown({ pool, db });
});

/** Shared buffers an EXPLAIN (ANALYZE, BUFFERS) of the statement read, in a transaction rolled
 *  back: the last of seven runs, as in a coordinator's session after its first ticks: the
 *  connection's catalog caches are warm (a first run reads the catalogs of the enum, the functions
 *  and the views it uses), and a PL/pgSQL function called by it plans its reads once, for its
 *  sixth call on (pending_late_first, sql/0054; before that it plans at each call). */
async function buffers(st: BoundStatement): Promise<number> {
  const client = await pool.connect();
  try {
    let read = 0;
    for (let run = 0; run < 7; run++) {
      await client.query('BEGIN');
      const { rows } = await client.query({ text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${st.text}`, values: st.values });
      await client.query('ROLLBACK');
      const plan = (rows[0]['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan;
      read = plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!;
    }
    return read;
  } finally {
    client.release();
  }
}

it('next_due and the reduce read the shards and scans from the oldest still in flight, under a held snapshot', { timeout: 120_000 }, async () => {
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT 1 FROM orders LIMIT 1');
  try {
    // 3,000 ticks' worth of scans and shards gone through their states, each step committed on
    // its own as the coordinator and the workers do: dead versions nothing can remove now.
    await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) SELECT 1, 'test', now(), 'mapped' FROM generate_series(1, $1)`, [
      TICKS,
    ]);
    await pool.query(`INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit) SELECT id, $1, 0, 0, 500 FROM timeout_center.scans`, [KIND]);
    await pool.query("UPDATE timeout_center.shards SET state = 'running', lease_expires_at = now() + interval '1 minute'");
    await pool.query("UPDATE timeout_center.shards SET state = 'done', lease_expires_at = NULL, finished_at = now()");
    await pool.query("UPDATE timeout_center.scans SET state = 'reduced', reduced_at = now()");
    // Statistics, as autovacuum keeps them (they count the live rows only).
    await pool.query('ANALYZE timeout_center.shards, timeout_center.scans');
    // This tick's work: a scan with one queued shard (no worker serves it: the unserved probe
    // finds it), and a scan whose only shard is done (the reduce closes it).
    const { rows: scans } = await pool.query<{ id: string }>(
      `INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) SELECT 1, 'test', now(), 'mapped' FROM generate_series(1, 2) RETURNING id`,
    );
    await pool.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state) VALUES ($1, $3, 0, 0, 500, 'queued'), ($2, $3, 0, 0, 500, 'done')`,
      [scans[0]!.id, scans[1]!.id, KIND],
    );

    // A tick with no bound yet (a new leader) reads every version once and learns the bounds.
    const floors = new ClaimFloors();
    const first = sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() });
    const unbounded = await buffers(first);
    const { rows } = await pool.query(first);
    // in_flight leaves out a queued shard no live worker serves (sql/0013): it waits for one
    expect(rows[0].in_flight).toBe(0);
    expect(rows[0].unserved).toEqual([KIND]);
    floors.update(rows[0]);
    expect(floors.shardsFrom()).toBeGreaterThan(TICKS);
    expect(floors.scansFrom()).toBe(Number(scans[0]!.id));

    // The next ticks read from the bounds: the same answers, a few buffers.
    const next = sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() });
    const bounded = await buffers(next);
    const { rows: again } = await pool.query(next);
    expect(again[0].in_flight).toBe(0);
    expect(again[0].unserved).toEqual([KIND]);
    expect(bounded).toBeLessThan(100);
    expect(unbounded).toBeGreaterThan(bounded * 5);

    const reduceFrom = (bounds: { scansFrom: number; shardsFrom: number; server: string }) => sql('coordinator/reduce', { maxScans: 500, ...bounds });
    const reduceBounded = await buffers(reduceFrom(floors.reduceBounds()));
    expect(reduceBounded).toBeLessThan(100);
    expect(await buffers(reduceFrom({ scansFrom: 0, shardsFrom: 0, server: '' }))).toBeGreaterThan(reduceBounded * 5);
    // Bounds computed on another server (a failover) are left out: read from the first.
    expect(await buffers(reduceFrom({ ...floors.reduceBounds(), server: 'another' }))).toBeGreaterThan(reduceBounded * 5);
    const { rows: reduced } = await pool.query(reduceFrom(floors.reduceBounds()));
    expect(reduced.map((r) => String(r.id))).toEqual([scans[1]!.id]);
  } finally {
    await holder.end();
  }
});
