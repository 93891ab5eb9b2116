// Runs coordinator + worker on a 200k burst with debug logs and prints the worker's shard phases.
import pg from 'pg';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL } from '../test/helpers/services.ts';
import { runCli, spawnCli } from '../test/helpers/processes.ts';
import { createOrdersSchema, writeConfig, CLOSE_SQL } from '../test/helpers/orders.ts';
const N = Number(process.argv[2] ?? 200000), S = Number(process.argv[3] ?? 20000), C = Number(process.argv[4] ?? 2);
const db = await createTestDatabase('pipe');
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
await createOrdersSchema(pool);
const cfg = writeConfig({ redisKeyPrefix: testKeyPrefix('pipe'), logLevel: 'debug', kinds: { 'order.unpaid': { shardSize: S, handler: { type: 'sql', sql: CLOSE_SQL } } }, coordinator: { claimChunk: 100000, maxInFlightShards: Math.max(4, Math.ceil(4 * C)) }, worker: { concurrency: C } });
const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: cfg };
await runCli(['migrate'], env);
const { rows } = await pool.query(`SELECT now() + interval '4 s' AS t0`);
const t0 = rows[0].t0;
await pool.query(`INSERT INTO orders (id, status) SELECT g, CASE WHEN g % 10 = 0 THEN 'paid' ELSE 'unpaid' END FROM generate_series(1, ${N}) g`);
await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, $1 FROM generate_series(1, ${N}) g`, [t0]);
await pool.query('VACUUM ANALYZE'); await pool.query('CHECKPOINT');
const c = spawnCli('coord', ['coordinator'], env);
const w = spawnCli('worker', ['worker'], env);
const until = Date.now() + 30000;
for (;;) { const r = await pool.query(`SELECT count(*)::int n FROM timeout_center.timeouts WHERE state <> 'done'`); if (r.rows[0].n === 0) break; if (Date.now() > until) { console.log('STUCK', r.rows[0].n, c.lines.filter((l) => l.level >= 40).slice(0, 5).map((l) => JSON.stringify(l).slice(0, 600)), w.lines.filter((l) => l.level >= 40).slice(0, 3).map((l) => JSON.stringify(l).slice(0, 600))); break; } await new Promise((r) => setTimeout(r, 200)); }
const r2 = await pool.query(`SELECT extract(epoch from max(closed_at) - $1) AS s FROM orders`, [t0]);
console.log('drain s', Number(r2.rows[0].s).toFixed(3), 'rate', Math.round(N / r2.rows[0].s));
for (const l of w.lines.filter((l) => l.msg === 'shard done')) console.log(JSON.stringify({ shard: l.shardId, done: l.done, lease: l.leaseMs, claimApply: l.claimApplyMs, finish: l.finishMs, commit: l.commitMs }));
for (const l of c.lines.filter((l) => l.msg === 'scan mapped' || l.msg === 'nothing new to map')) console.log('coord', l.msg, l.planMs, l.shards ?? '', l.inFlight, l.time ?? '');
await c.stop(); await w.stop(); await pool.end(); await db.drop();
