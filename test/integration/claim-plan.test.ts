// The claim's plan does not depend on the row estimate (issue 45). Under an old snapshot held
// elsewhere autovacuum's pass over the swollen table comes late, so the statistics a flood is
// claimed with are from before it was written, and the heap's pages hold far fewer live rows than
// it has pages: the planner expects a few hundred due rows. Planned inline, the claim then read
// every due row of the flood through a bitmap scan and sorted them on disk for its limit, on every
// shard of it (docs/vacuum-horizon.md). The shard's read of fresh rows walks the due index in
// order and stops at its limit, whatever the estimate: each form of the claim (plain, batch with a
// SQL handler, oldest and newest first; the external path's claims, commit first and in two
// phases) reads about its limit of index entries and writes nothing to disk.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { claimPlain, claimTwoPhase } from '../../src/worker/external/claim.js';
import type { Lease } from '../../src/worker/lease.js';
import { composeClaim, batchSqlHandler } from '../../src/worker/sql-handler.js';
import { dueIndexEntriesSoFar, dueIndexRead } from '../helpers/due-index-read.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
const FLOOD = 100_000;
const LIMIT = 10_000;
let db: TestDatabase;
let pool: pg.Pool;
/** The shards of the flood: one claims oldest first, the other newest first (take_lease.sql from_newest). */
let oldest: number;
let newest: number;

/** A claim's read of the due index: its limit of entries, and the 3,000 of the stream claimed
 *  before the flood (dead, not yet vacuumed); the whole flood would be 100,000. */
const aboutItsLimit = (entries: number): number | 'about its limit' => (entries >= LIMIT && entries <= LIMIT + 4000 ? 'about its limit' : entries);

beforeAll(async () => {
  db = await createTestDatabase('claim_plan');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  const config = writeConfig({ redisKeyPrefix: testKeyPrefix('claim-plan'), kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } } } });
  const migrated = await runCli(['migrate'], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config });
  expect(migrated.code, migrated.stderr).toBe(0);
  // As a held snapshot leaves the table: autovacuum's pass has not come, the heap has swollen with
  // rows already done (dead), and the statistics are from when a few thousand were pending.
  await pool.query('ALTER TABLE timeout_center.timeouts SET (autovacuum_enabled = off)');
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, 'gone-' || g, now() + interval '1 day' FROM generate_series(1, 400000) g`,
    [KIND],
  );
  await pool.query('DELETE FROM timeout_center.timeouts');
  // the stream's last few thousand, due over the last minutes, analyzed before they were claimed
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, 'stream-' || g, now() - g * interval '200 milliseconds' FROM generate_series(1, 3000) g`,
    [KIND],
  );
  await pool.query('ANALYZE timeout_center.timeouts');
  await pool.query('DELETE FROM timeout_center.timeouts');
  // The flood: due a second ago, one due instant, with its orders.
  const { rows: at } = await pool.query<{ t: string }>("SELECT (date_trunc('second', now()) - interval '1 second')::text AS t");
  await pool.query(
    `WITH o AS (INSERT INTO orders (id, status) SELECT i, 'unpaid' FROM generate_series(1, $1::bigint) i RETURNING id)
   INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $2, id::text, $3::timestamptz FROM o`,
    [FLOOD, KIND, at[0]!.t],
  );
  const { rows: estimate } = await pool.query<{ 'QUERY PLAN': { Plan: { 'Plan Rows': number } }[] }>(
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM timeout_center.timeouts WHERE kind = 'order.unpaid' AND state = 'pending' AND available_at <= statement_timestamp()",
  );
  // the premise: the planner expects a small fraction of the flood
  expect(estimate[0]!['QUERY PLAN'][0]!.Plan['Plan Rows']).toBeLessThan(FLOOD / 10);

  const { rows: scan } = await pool.query<{ id: string }>(
    "INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', now(), 'mapped') RETURNING id",
  );
  const { rows: shards } = await pool.query<{ id: string }>(
    `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, not_before)
   SELECT $1, $2, s, 0, $3, $4 FROM generate_series(0, 1) s ORDER BY s RETURNING id`,
    [scan[0]!.id, KIND, LIMIT, at[0]!.t],
  );
  [oldest, newest] = shards.map((s) => Number(s.id)) as [number, number];
}, 120_000);

afterAll(async () => {
  await tearDown({ pool, db });
});

it('same database: each form of the claim reads its limit of the due index in order, never the whole flood', { timeout: 60_000 }, async () => {
  const batch = await batchSqlHandler(pool, CLOSE_SQL, 30_000);
  expect(batch).toBeDefined();

  // name, statement, shard, batch form ($4)
  const forms: [string, string, number, boolean][] = [
    ['plain, oldest first', composeClaim({}), oldest, false],
    ['plain, newest first', composeClaim({ claimOrder: 'newest' }), newest, false],
    ['batch with the SQL handler, oldest first', batch!.sql, oldest, true],
    ['batch with the SQL handler, newest first', batch!.newest.sql, newest, true],
  ];
  for (const [form, text, shard, batchForm] of forms) {
    const read = await dueIndexRead(pool, text, [shard, KIND, LIMIT, batchForm]);
    expect({ form, tempBlocks: read.tempBlocks, entries: aboutItsLimit(read.entries) }).toEqual({ form, entries: 'about its limit', tempBlocks: 0 });
  }
});

it('external path: each claim reads its limit of the due index in order, never the whole flood', { timeout: 60_000 }, async () => {
  // Shards of the same flood for a handler outside the center (here an HTTP one: the claim is the
  // same for every external handler but a routed SQL one, which reads timeouts_due_by_target).
  const external = { via: 'http' } as const;
  let seq = 10;
  const lease = async (fromNewest: boolean): Promise<Lease> => {
    const { rows } = await pool.query<{ id: string; scan_id: string; lease_token: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, not_before, state, lease_token)
       SELECT scan_id, kind, $2, 0, claim_limit, not_before, 'running', gen_random_uuid() FROM timeout_center.shards WHERE id = $1
       RETURNING id, scan_id, lease_token`,
      [fromNewest ? newest : oldest, seq++],
    );
    const r = rows[0]!;
    return {
      id: Number(r.id),
      scan_id: Number(r.scan_id),
      kind: KIND,
      lease_token: r.lease_token,
      attempts: 1,
      claim_limit: LIMIT,
      bucket: null,
      from_newest: fromNewest,
      suspect: false,
      claimAt: 0,
    };
  };

  // Two phases: the claim in the run's open center transaction (rolled back here).
  for (const fromNewest of [false, true]) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const before = await dueIndexEntriesSoFar(client);
      const claimed = await claimTwoPhase(client, await lease(fromNewest), external);
      expect(claimed?.claimed.items).toHaveLength(LIMIT);
      expect({ fromNewest, entries: aboutItsLimit((await dueIndexEntriesSoFar(client)) - before) }).toEqual({ fromNewest, entries: 'about its limit' });
      // the planner's settings are the session's again for the rest of the run's transaction
      const { rows } = await client.query<{ bitmap: string; seq: string; sort: string }>(
        "SELECT current_setting('enable_bitmapscan') AS bitmap, current_setting('enable_seqscan') AS seq, current_setting('enable_sort') AS sort",
      );
      expect(rows[0]).toEqual({ bitmap: 'on', seq: 'on', sort: 'on' });
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  }

  // Commit first: the claim commits its hold, so the entries are read from the index's counters
  // once the claiming session has flushed them.
  const claimer = new pg.Pool({ connectionString: db.url, max: 1 });
  try {
    const total = async () => {
      await claimer.query('SELECT pg_stat_force_next_flush()');
      await claimer.query('SELECT 1');
      const { rows } = await pool.query<{ n: string }>(
        "SELECT idx_tup_read::text AS n FROM pg_stat_user_indexes WHERE indexrelid = 'timeout_center.timeouts_due_by_key'::regclass",
      );
      return Number(rows[0]!.n);
    };
    for (const fromNewest of [false, true]) {
      const before = await total();
      const claimed = await claimPlain(claimer, await lease(fromNewest), external);
      expect(claimed?.items).toHaveLength(LIMIT);
      expect({ fromNewest, entries: aboutItsLimit((await total()) - before) }).toEqual({ fromNewest, entries: 'about its limit' });
    }
  } finally {
    await claimer.end();
  }
});
