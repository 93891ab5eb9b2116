// The batch form of SQL handlers (src/worker/sql-handler.ts): which handlers get it, and that the
// one statement claims, applies and reports the skipped ids exactly as the plain form would.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, statementValues } from '../../src/db/queries.js';
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
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL: TEST_REDIS_URL,
    TIMEOUT_CENTER_CONFIG: writeConfig({ kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } }),
  };
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
    expect(
      await batchSqlHandler(pool, "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND $2::jsonb[] IS NOT NULL RETURNING id", 1000),
    ).toBeUndefined();
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
    const { rows } = await pool.query(batch.sql, statementValues('worker/claim', { shardId: shard[0].id, kind: 'order.unpaid', claimLimit: 15, batch: true }));
    expect(rows[0].n).toBe(15);
    // The 15 earliest due (ids 1-15); of those, 4, 8 and 12 were paid: skipped, written once with
    // that result.
    expect(rows[0].skipped).toBe(3);
    const { rows: results } = await pool.query(`SELECT biz_id FROM timeout_center.all_timeouts WHERE result = 'skipped' ORDER BY biz_id::int`);
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
    const { rows: plain } = await pool.query(sql('worker/claim', { shardId: shard[0].id, kind: 'order.unpaid', claimLimit: 3, batch: false }));
    expect(plain[0].n).toBe(3);
    expect(plain[0].ids).toEqual(['16', '17', '18'].map((b) => idsByBiz.get(b)));
    expect(plain[0].biz_ids).toEqual(['16', '17', '18']);
    expect(plain[0].lateness_ms).toHaveLength(3);
    expect(plain[0].lateness_n).toBeNull();
    expect(plain[0].skipped).toBe(0);
  });

  it('has a newest-first form for a flood mapped ahead: the latest rows due by its instant first, none due after it', async () => {
    // Orders 101-120: 101-108 due 3 s ago, 109-116 2 s ago (the flood's instant, not_before, is
    // 1.5 s ago), 117-120 1 s ago, after the instant.
    await pool.query(`DELETE FROM timeout_center.timeouts`);
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(101, 120) g`);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT 'order.unpaid', g::text, now() - CASE WHEN g <= 108 THEN interval '3 s' WHEN g <= 116 THEN interval '2 s' ELSE interval '1 s' END
         FROM generate_series(101, 120) g`,
    );
    const { rows: scan } = await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
    const { rows: shards } = await pool.query<{ id: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, not_before)
       SELECT $1, 'order.unpaid', s, 0, 10, now() - interval '1.5 s' FROM generate_series(0, 1) s RETURNING id`,
      [scan[0].id],
    );
    const batch = (await batchSqlHandler(pool, CLOSE_SQL, 1000))!;
    expect(batch.newest.name).not.toBe(batch.name);
    const newest = await pool.query(
      batch.newest.sql,
      statementValues('worker/claim', { shardId: Number(shards[1]!.id), kind: 'order.unpaid', claimLimit: 10, batch: true }),
    );
    expect(newest.rows[0].n).toBe(10);
    const moved = async (shardId: string) =>
      (await pool.query<{ b: number }>(`SELECT biz_id::int AS b FROM timeout_center.done_timeouts WHERE shard_id = $1 ORDER BY 1`, [shardId])).rows.map(
        (r) => r.b,
      );
    const fromNewest = await moved(shards[1]!.id);
    // All eight due at 2 s, then two of those due at 3 s; nothing due after the instant.
    expect(fromNewest.filter((b) => b >= 109 && b <= 116)).toHaveLength(8);
    expect(fromNewest.filter((b) => b <= 108)).toHaveLength(2);
    expect(fromNewest.filter((b) => b >= 117)).toEqual([]);
    // The oldest-first form takes the rest in due order: the six left of 101-108, then 117-120.
    const oldest = await pool.query(
      batch.sql,
      statementValues('worker/claim', { shardId: Number(shards[0]!.id), kind: 'order.unpaid', claimLimit: 10, batch: true }),
    );
    expect(oldest.rows[0].n).toBe(10);
    expect((await moved(shards[0]!.id)).sort((a, b) => a - b)).toEqual([
      ...Array.from({ length: 8 }, (_, i) => 101 + i).filter((b) => !fromNewest.includes(b)),
      117,
      118,
      119,
      120,
    ]);
    const { rows: open } = await pool.query(`SELECT count(*)::int AS n FROM orders WHERE id BETWEEN 101 AND 120 AND status = 'unpaid'`);
    expect(open[0].n).toBe(0);
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
    const { rows } = await pool.query(
      form.batch.sql,
      statementValues('worker/claim', { shardId: shard[0].id, kind: 'order.unpaid', claimLimit: 100, batch: true }),
    );
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
