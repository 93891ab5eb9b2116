// The reindexer (src/retention/reindexer.ts): once an old snapshot is gone and VACUUM has freed
// what it kept, the indexes of timeouts that grew meanwhile are rebuilt to their working size,
// and not while a snapshot is old.
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { reindexBloated, REINDEX_QUIET_S } from '../../src/retention/reindexer.js';
import { runCli } from '../helpers/processes.js';
import { writeConfig, CLOSE_SQL, createOrdersSchema } from '../helpers/orders.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

let db: TestDatabase;
let pool: pg.Pool;
const logger = pino({ level: 'silent' });

beforeAll(async () => {
  db = await createTestDatabase('reindexer');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  await createOrdersSchema(pool);
  const config = writeConfig({ redisKeyPrefix: testKeyPrefix('reindexer'), kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
  expect((await runCli(['migrate'], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config })).code).toBe(0);
});

afterAll(() => tearDown({ pool, db }));

const size = async (index: string) =>
  (await pool.query<{ b: number }>('SELECT pg_relation_size($1::regclass)::float8 AS b', [`timeout_center.${index}`])).rows[0]!.b;

it('rebuilds the indexes a backlog left bloated, once no snapshot is old', { timeout: 120_000 }, async () => {
  // 300,000 timeouts written and deleted (what claims under a held snapshot leave), 100 live.
  await pool.query(
    "INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', i::text, now() + i * interval '1 ms' FROM generate_series(1, 300100) i",
  );
  await pool.query('DELETE FROM timeout_center.timeouts WHERE biz_id::bigint <= 300000');
  await pool.query('VACUUM ANALYZE timeout_center.timeouts');
  const before = await size('timeouts_due_by_key');
  expect(before).toBeGreaterThan(8 * 1024 * 1024);

  // A snapshot older than REINDEX_QUIET_S: nothing is rebuilt.
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT 1 FROM orders LIMIT 1');
  await holder.query(`SELECT pg_sleep(${REINDEX_QUIET_S + 1})`);
  expect((await reindexBloated(pool, logger)).skipped).toBe('old snapshot');
  await holder.end();

  const result = await reindexBloated(pool, logger);
  expect(result.rebuilt.map((r) => r.index)).toEqual(expect.arrayContaining(['timeouts_due_by_key', 'timeouts_one_live_per_biz']));
  expect(await size('timeouts_due_by_key')).toBeLessThan(256 * 1024);
  // Nothing left behind, the 100 live rows still found through the rebuilt index.
  const { rows } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'timeout_center.timeouts'::regclass AND NOT i.indisvalid",
  );
  expect(rows[0]!.n).toBe(0);
  expect((await pool.query("SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE kind = 'order.unpaid' AND state = 'pending'")).rows[0].n).toBe(100);
  // A second check finds nothing to do.
  expect((await reindexBloated(pool, logger)).rebuilt).toEqual([]);
});
