// Lateness is taken after the commit that applied the rows (issue 31, point 2), on both paths:
// tc_lateness_seconds, a shard's finished_at and the console's lateness chart include the time the
// handler took. Three kinds whose handlers take 1.2 s, run by one real `run` process:
//   late.batch  a SQL handler inside the claim statement (same database, batch form; pg_sleep)
//   late.plain  a SQL handler that reads payloads ($2): claimed, then run apart (same database,
//               plain form; pg_sleep)
//   late.code   a code handler that waits 1.2 s (external path: claim committed first, record after)
// Each timeout is due 0.3 s after it is seeded, so the claim starts near its due time and the
// lateness at commit is at least the handler's 1.2 s. Before the fix, tc_lateness_seconds and the
// rows' finished_at were taken at the start of the claim statement (and on the external path at
// the claim, before the handler ran): a few milliseconds.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { lastHour } from '../../src/operations/overview.js';
import { createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const HANDLER_S = 1.2;
const N = 20;
const KINDS = ['late.batch', 'late.plain', 'late.code'] as const;
const SLEEP = `(SELECT pg_sleep(${HANDLER_S})) IS NOT NULL`;

/** Value of one sample of a Prometheus text exposition. */
function metric(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const m = /^[^{ ]+\{([^}]*)\} (\S+)$/.exec(line);
    if (!m) continue;
    const have = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[2]);
  }
  return undefined;
}

let db: TestDatabase;
let pool: pg.Pool;
let proc: CliProcess;
let port: number;

beforeAll(async () => {
  db = await createTestDatabase('lateness-at-commit');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  await createOrdersSchema(pool);
  const dir = mkdtempSync(join(tmpdir(), 'tc-late-'));
  writeFileSync(
    join(dir, 'slow.mjs'),
    `export default async function slow(items, ctx) {
  await new Promise((r) => setTimeout(r, ${HANDLER_S * 1000}));
  const { rows } = await ctx.client.query(
    "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id::text",
    [items.map((i) => i.bizId)],
  );
  return rows.map((r) => r.id);
}
`,
  );
  const kind = (handler: NonNullable<ConfigInput['kinds']>[string]['handler']) => ({ shardSize: 100, maxAttempts: 3, timeLimitMs: 5000, handler });
  const config: ConfigInput = {
    redisKeyPrefix: testKeyPrefix('lateness-at-commit'),
    poolSize: 6,
    kinds: {
      'late.batch': kind({
        type: 'sql',
        sql: `UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' AND ${SLEEP} RETURNING id`,
      }),
      'late.plain': kind({
        type: 'sql',
        sql: `UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' AND cardinality($2::jsonb[]) >= 0 AND ${SLEEP} RETURNING id`,
      }),
      'late.code': kind({ type: 'code', module: join(dir, 'slow.mjs') }),
    },
    coordinator: { lockTtlMs: 2000, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: 10_000, blockMs: 200, concurrency: 3 },
    alerts: { lagSlaMs: 600_000 },
  };
  const configPath = writeConfig(config);
  const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined, TIMEOUT_CENTER_CONFIG: configPath };
  const migrated = await runCli(['migrate'], env);
  if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
  proc = spawnCli('run', ['run', '--port', '0'], env);
  port = Number((await proc.waitForMsg('serving /metrics, /healthz, /readyz', 30_000))['port']);
  await proc.waitForMsg('worker started', 30_000);
  // Each kind's orders and timeouts, due 0.3 s from now on PostgreSQL's clock.
  for (const [i, k] of KINDS.entries()) {
    const from = i * 1000 + 1;
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::bigint, $2::bigint) g`, [from, from + N - 1]);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $3, g::text, now() + interval '300 ms' FROM generate_series($1::bigint, $2::bigint) g`,
      [from, from + N - 1, k],
    );
  }
  const deadline = Date.now() + 40_000;
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.done_timeouts`);
    if (rows[0]!.n === N * KINDS.length) break;
    if (Date.now() > deadline) throw new Error(`only ${rows[0]!.n} of ${N * KINDS.length} timeouts done after 40 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
  // The worker observes the metric after its commit; give it that moment.
  await new Promise((r) => setTimeout(r, 500));
}, 90_000);

afterAll(async () => {
  await killAll();
  await pool?.end();
  await db?.drop();
});

describe('lateness at commit (handlers that take 1.2 s)', () => {
  it('tc_lateness_seconds counts the handler on the same-database batch and plain forms and on the external path', async () => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const figures: Record<string, { n: number; count?: number; underOne?: number; sum: number; stamped: number; minStamped: number; rowMin: number }> = {};
    for (const kind of KINDS) {
      // Each shard's stamp (its last statement before COMMIT) minus each row's due time: the
      // metric is read after that COMMIT, so it is never below.
      const { rows } = await pool.query<{ n: number; stamped: number; min_stamped: number; row_min: number }>(
        `SELECT count(*)::int AS n, sum(extract(epoch FROM s.finished_at - d.due_at))::float8 AS stamped,
                min(extract(epoch FROM s.finished_at - d.due_at))::float8 AS min_stamped,
                min(extract(epoch FROM d.finished_at - d.due_at))::float8 AS row_min
           FROM timeout_center.done_timeouts d JOIN timeout_center.shards s ON s.id = d.shard_id
          WHERE d.kind = $1 AND d.result = 'applied'`,
        [kind],
      );
      const r = rows[0]!;
      figures[kind] = {
        n: r.n,
        count: metric(text, 'tc_lateness_seconds_count', { kind }),
        underOne: metric(text, 'tc_lateness_seconds_bucket', { kind, le: '1' }),
        sum: metric(text, 'tc_lateness_seconds_sum', { kind }) ?? 0,
        stamped: r.stamped,
        minStamped: r.min_stamped,
        rowMin: r.row_min,
      };
    }
    const round = (x: number) => Math.round(x * 1000) / 1000;
    console.log(
      `[lateness-at-commit] ${JSON.stringify(
        Object.fromEntries(
          Object.entries(figures).map(([k, f]) => [
            k,
            { count: f.count, underOne: f.underOne, meanMetricS: round(f.sum / N), meanShardStampS: round(f.stamped / N), rowFinishedMinS: round(f.rowMin) },
          ]),
        ),
      )}`,
    );
    for (const [kind, f] of Object.entries(figures)) {
      expect(f.n, kind).toBe(N);
      expect(f.count, kind).toBe(N);
      expect(f.underOne, `${kind}: every lateness includes the handler's ${HANDLER_S} s`).toBe(0);
      expect(f.minStamped, `${kind}: the shard's finished_at comes after its handler`).toBeGreaterThanOrEqual(HANDLER_S);
      // The claim (the record on the external path) counts lateness in whole milliseconds (int4, per
      // distinct due time): up to 1 ms per row below the stamp's microseconds (CI once saw 24.6663 s against 24.6675 s for 20 rows).
      expect(f.sum, `${kind}: the metric is taken after the commit, so after the shard's stamp`).toBeGreaterThanOrEqual(f.stamped - f.n * 0.001);
      // A done row's own finished_at is written after its handler ran (claim.sql / finish.sql /
      // external_record.sql), before the commit.
      expect(f.rowMin, `${kind}: a done row's finished_at comes after its handler`).toBeGreaterThanOrEqual(HANDLER_S);
    }
  });

  it("a shard's done rows share one finished_at (rates by finished_at count whole shards)", async () => {
    const { rows } = await pool.query<{ stamps: number }>(
      `SELECT max(n)::int AS stamps FROM (SELECT count(DISTINCT finished_at) AS n FROM timeout_center.done_timeouts GROUP BY shard_id) s`,
    );
    expect(rows[0]!.stamps).toBe(1);
  });

  it("the console's lateness chart reads the shards' commit stamps", async () => {
    const points = await lastHour(pool);
    const finished = points.filter((p) => Number(p.finished) > 0);
    expect(finished.reduce((a, p) => a + Number(p.finished), 0)).toBe(N * KINDS.length);
    for (const p of finished) expect(Number(p.latenessP95)).toBeGreaterThanOrEqual(HANDLER_S);
  });
});
