import pg from 'pg';
import { readFileSync } from 'node:fs';
import { createTestDatabase } from '../test/helpers/services.ts';
import { batchSqlHandler } from '../dist/worker/sql-handler.js';
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
const N = Number(process.argv[2] ?? 200000);
const K = Number(process.argv[3] ?? 5000);
const CONC = Number(process.argv[4] ?? 2);
const only = process.argv[5]?.split(',');
const LIMIT = `WITH due AS (UPDATE timeout_center.timeouts t SET state='done', result='applied', attempts=t.attempts+1, finished_at=clock_timestamp()
 WHERE t.id IN (SELECT id FROM timeout_center.timeouts WHERE kind='order.unpaid' AND state='pending' AND available_at <= now() ORDER BY available_at LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING t.biz_id),
closed AS (UPDATE orders SET status='closed', closed_at=clock_timestamp(), closes=closes+1 WHERE id IN (SELECT biz_id::bigint FROM due) AND status='unpaid' RETURNING id)
SELECT (SELECT count(*) FROM due)::int AS n`;
const CLAIM = readFileSync('src/worker/queries/claim.sql', 'utf8');
const LIMIT_ARR = LIMIT.replace('WHERE t.id IN (SELECT id', 'WHERE t.id = ANY (ARRAY(SELECT id').replace('FOR UPDATE SKIP LOCKED) RETURNING', 'FOR UPDATE SKIP LOCKED)) RETURNING');
const CLAIM_ARR = CLAIM.replace('WHERE t.id IN (SELECT d.id', 'WHERE t.id = ANY (ARRAY(SELECT d.id').replace('FOR UPDATE SKIP LOCKED)\n     AND t.state', 'FOR UPDATE SKIP LOCKED))\n     AND t.state');
if (LIMIT_ARR === LIMIT) throw new Error('replace failed');
const CLOSE = "UPDATE orders SET status = 'closed', closed_at = clock_timestamp(), closes = closes + 1 WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";
async function setup() {
  const db = await createTestDatabase('exp');
  const pool = new pg.Pool({ connectionString: db.url, max: CONC + 2 });
  for (const f of ['0001_init', '0002_retention', '0003_worker_claim']) await pool.query(readFileSync(`sql/${f}.sql`, 'utf8'));
  await pool.query(`INSERT INTO timeout_center.kinds (kind, shard_size) VALUES ('order.unpaid', ${K})`);
  await pool.query(`CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, due_at timestamptz NOT NULL, closed_at timestamptz, closes integer NOT NULL DEFAULT 0)`);
  await pool.query(`INSERT INTO orders SELECT i, CASE WHEN i % 10 = 0 THEN 'paid' ELSE 'unpaid' END, now() FROM generate_series(1, ${N}) i`);
  await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', i::text, now() - interval '1 s' FROM generate_series(1, ${N}) i`);
  await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'x', now())`);
  await pool.query('VACUUM ANALYZE orders'); await pool.query('VACUUM ANALYZE timeout_center.timeouts');
  await pool.query(`CHECKPOINT`);
  return { db, pool };
}
const RAW = { getTypeParser: () => (v: string) => v } as unknown as typeof pg.types;
let BATCH: string | undefined;
let BATCH2: string | undefined;
type Step = (c: pg.PoolClient, shard: number) => Promise<number>;
const variants: Record<string, Step> = {
  limit: async (c) => (await c.query(LIMIT, [K])).rows[0].n,
  limitarr: async (c) => (await c.query(LIMIT_ARR, [K])).rows[0].n,
  batch: async (c, shard) => {
    await c.query('BEGIN');
    const { rows } = await c.query({ text: BATCH!, values: [shard, 'order.unpaid', K, true], types: RAW });
    await c.query('COMMIT');
    return Number(rows[0].n);
  },
  batchnolat: async (c, shard) => {
    await c.query('BEGIN');
    const { rows } = await c.query({ text: BATCH2!, values: [shard, 'order.unpaid', K, true], types: RAW });
    await c.query('COMMIT');
    return Number(rows[0].n);
  },
  raw: async (c, shard) => {
    await c.query('BEGIN');
    const { rows } = await c.query({ text: CLAIM_ARR, values: [shard, 'order.unpaid', K], types: RAW });
    await c.query({ text: CLOSE, values: [rows[0].biz_ids], types: RAW });
    await c.query('COMMIT');
    return Number(rows[0].n);
  },
  rawnoret: async (c, shard) => {
    await c.query('BEGIN');
    const { rows } = await c.query({ text: CLAIM_ARR, values: [shard, 'order.unpaid', K], types: RAW });
    await c.query({ text: 'WITH h AS (' + CLOSE + ') SELECT count(*) FROM h', values: [rows[0].biz_ids], types: RAW });
    await c.query('COMMIT');
    return Number(rows[0].n);
  },
  workerarr: async (c, shard) => {
    await c.query('BEGIN');
    const { rows } = await c.query(CLAIM_ARR, [shard, 'order.unpaid', K]);
    await c.query(CLOSE, [rows[0].biz_ids]);
    await c.query('COMMIT');
    return rows[0].n;
  },
  worker: async (c, shard) => {
    await c.query('BEGIN');
    const { rows } = await c.query(CLAIM, [shard, 'order.unpaid', K]);
    await c.query(CLOSE, [rows[0].biz_ids]);
    await c.query('COMMIT');
    return rows[0].n;
  },
};
for (const [name, step] of Object.entries(variants)) {
  if (only && !only.includes(name)) continue;
  const { db, pool } = await setup();
  BATCH = (await batchSqlHandler(pool, CLOSE, 10000))!.sql;
  BATCH2 = BATCH.replace(/coalesce\(array_agg\(extract[^\n]*AS lateness/, "'{}' AS lateness");
  if (BATCH2 === BATCH) throw new Error('no lateness replace');
  const t0 = performance.now();
  let shard = 0; let total = 0;
  await Promise.all(Array.from({ length: CONC }, async () => {
    const c = await pool.connect();
    for (;;) { const n = await step(c, ++shard); total += n; if (n === 0) break; }
    c.release();
  }));
  const s = (performance.now() - t0) / 1000;
  console.log(`${name}: ${total} in ${s.toFixed(2)} s = ${Math.round(total / s)}/s`);
  await pool.end(); await db.drop();
}
