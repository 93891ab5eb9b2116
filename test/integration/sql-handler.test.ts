// The batch form of SQL handlers (src/worker/sql-handler.ts): which handlers get it, and that the
// one statement claims, applies and reports the skipped ids exactly as the plain form would.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { query } from '../../src/db/queries.js';
import { batchSqlHandler, sqlHandlerForm } from '../../src/worker/sql-handler.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase('sqlhandler');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  await createOrdersSchema(pool);
  const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: writeConfig({ kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } }) };
  const migrated = await runCli(['migrate'], env);
  expect(migrated.code, migrated.stderr).toBe(0);
});

afterAll(() => tearDown({ pool, db }));

describe('batch form of a SQL handler', () => {
  it('is built for a handler that takes an array in $1 and returns what it changed', async () => {
    expect(await batchSqlHandler(pool, CLOSE_SQL, 1000)).toBeDefined();
    expect(await batchSqlHandler(pool, `${CLOSE_SQL};`, 1000)).toBeDefined();
    expect(await batchSqlHandler(pool, 'SELECT x FROM unnest($1::text[]) x', 1000)).toBeDefined();
  });

  it('is not built where the handler must run as written', async () => {
    // payloads in $2; a scalar $1; no RETURNING (nothing to tell applied from skipped)
    expect(await batchSqlHandler(pool, "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND $2::jsonb[] IS NOT NULL RETURNING id", 1000)).toBeUndefined();
    expect(await batchSqlHandler(pool, "UPDATE orders SET status = 'closed' WHERE id = $1 RETURNING id", 1000)).toBeUndefined();
    expect(await batchSqlHandler(pool, "UPDATE orders SET status = 'closed' WHERE id = ANY($1)", 1000)).toBeUndefined();
  });

  it('claims the shard, applies the handler and writes each timeout once with its result, in one statement', async () => {
    await pool.query(`INSERT INTO orders (id, status) SELECT g, CASE WHEN g % 4 = 0 THEN 'paid' ELSE 'unpaid' END FROM generate_series(1, 20) g`);
    // Two due times: ids 1-8 two seconds ago, the rest one second ago.
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT 'order.unpaid', g::text, now() - CASE WHEN g <= 8 THEN interval '2 s' ELSE interval '1 s' END FROM generate_series(1, 20) g`,
    );
    const { rows: scan } = await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
    const { rows: shard } = await pool.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit) VALUES ($1, 'order.unpaid', 0, 0, 15) RETURNING id`,
      [scan[0].id],
    );
    const { rows: ids } = await pool.query<{ id: string; biz_id: string }>(`SELECT id, biz_id FROM timeout_center.timeouts`);
    const idsByBiz = new Map(ids.map((r) => [r.biz_id, r.id]));
    const batch = (await batchSqlHandler(pool, CLOSE_SQL, 1000))!;
    const { rows } = await pool.query(batch.sql, [shard[0].id, 'order.unpaid', 15, true]);
    expect(rows[0].n).toBe(15);
    // The 15 earliest due (ids 1-15); of those, 4, 8 and 12 were paid: skipped, written once with
    // that result.
    expect(rows[0].skipped).toBe(3);
    const { rows: results } = await pool.query(
      `SELECT biz_id FROM timeout_center.all_timeouts WHERE result = 'skipped' ORDER BY biz_id::int`,
    );
    expect(results.map((r) => r.biz_id)).toEqual(['4', '8', '12']);
    // Lateness per distinct due time, in whole milliseconds (int4[]), with how many rows had it:
    // 8 rows about 2 s late, 7 about 1 s.
    const pairs = (rows[0].lateness_ms as number[]).map((ms, i) => [ms, (rows[0].lateness_n as number[])[i]!] as const).sort((a, b) => a[0] - b[0]);
    expect(pairs.map(([, n]) => n)).toEqual([7, 8]);
    expect(pairs[0]![0]).toBeGreaterThanOrEqual(900);
    expect(pairs[1]![0]).toBeGreaterThanOrEqual(1900);
    expect(pairs[1]![0]).toBeLessThan(60_000);
    const { rows: orders } = await pool.query(`SELECT status, count(*)::int AS n FROM orders GROUP BY status ORDER BY status`);
    expect(orders).toEqual([
      { status: 'closed', n: 12 },
      { status: 'paid', n: 5 },
      { status: 'unpaid', n: 3 },
    ]);
    const { rows: states } = await pool.query(`SELECT state, count(*)::int AS n FROM timeout_center.all_timeouts GROUP BY state ORDER BY state`);
    expect(states).toEqual([
      { state: 'done', n: 15 },
      { state: 'pending', n: 5 },
    ]);
    // claim.sql's plain form (the rows only locked): one lateness per row, no counts, the arrays
    // in id order.
    const claim = query(new URL('../../src/worker/', import.meta.url), 'claim');
    const { rows: plain } = await pool.query(claim, [shard[0].id, 'order.unpaid', 3, false]);
    expect(plain[0].n).toBe(3);
    expect(plain[0].ids).toEqual(['16', '17', '18'].map((b) => idsByBiz.get(b)));
    expect(plain[0].biz_ids).toEqual(['16', '17', '18']);
    expect(plain[0].lateness_ms).toHaveLength(3);
    expect(plain[0].lateness_n).toBeNull();
    expect(plain[0].skipped).toBe(0);
  });

  it('keeps $$, $& and $1-like text of the handler as written (a replacer, not a replacement string)', async () => {
    // Literals that String.replace's replacement patterns would rewrite: $$ -> $, $& -> the matched line.
    const sql = "UPDATE orders SET status = $t$cl$$o$&sed$t$ || '$$' WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";
    const form = await sqlHandlerForm(pool, sql, 1000);
    expect(form.form, form.reason).toBe('batch');
    await pool.query(`INSERT INTO orders (id, status) VALUES (1001, 'unpaid')`);
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '1001', now() - interval '1 s')`);
    const { rows: scan } = await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
    const { rows: shard } = await pool.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit) VALUES ($1, 'order.unpaid', 0, 0, 100) RETURNING id`,
      [scan[0].id],
    );
    if (form.form !== 'batch') return;
    const { rows } = await pool.query(form.batch.sql, [shard[0].id, 'order.unpaid', 100, true]);
    expect(rows[0].n).toBeGreaterThanOrEqual(1); // with the rows the test above left pending
    const { rows: order } = await pool.query(`SELECT status FROM orders WHERE id = 1001`);
    expect(order[0].status).toBe('cl$$o$&sed$$');
  });

  it('says why a handler runs in the plain form', async () => {
    const payloads = await sqlHandlerForm(pool, "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND $2::jsonb[] IS NOT NULL RETURNING id", 1000);
    expect(payloads).toMatchObject({ form: 'plain', reason: expect.stringContaining('$2') });
    const scalar = await sqlHandlerForm(pool, "UPDATE orders SET status = 'closed' WHERE id = $1 RETURNING id", 1000);
    expect(scalar).toMatchObject({ form: 'plain', reason: expect.stringContaining('not an array') });
    const noReturning = await sqlHandlerForm(pool, "UPDATE orders SET status = 'closed' WHERE id = ANY($1)", 1000);
    expect(noReturning).toMatchObject({ form: 'plain', reason: expect.stringContaining('cannot stand inside the claim statement') });
  });
});
