// The external path with real processes: the center in its own database, orders split over two
// business databases by modulo (orders_a on the shared server, orders_b on a private PostgreSQL
// instance that the test stops for 10 s), plus an HTTP kind and a code kind. One set of processes
// (coordinator, two workers) serves every scenario of the file, in order:
//   1. 20,000 orders, 90 % unpaid, one poison row in orders_b; a worker SIGKILLed right after a
//      business commit and before the center's record: the re-run reads the marker and records
//      what the first run did (applied once, recorded as applied).
//   2. orders_b stopped for 10 s mid-run: shards retry with backoff, nothing fails for good, the
//      breaker opens (alert, status) and closes (alert).
//   3. an HTTP endpoint answering 503, then 401, then a malformed body, then too slowly: a bounded
//      number of POSTs, nothing failed for good, and a payer's cancel never waits on the call.
//   4. a code handler that ignores its signal: aborted, its connection destroyed, its late write
//      lost; the shard applies once on its retry.
// Every scenario ends with the invariants per business database.
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { CLI, killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { startPostgres, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { linesMatching, report, sleep, waitUntil } from './harness.js';
import { quietPool } from '../helpers/quiet-pool.js';

const run = promisify(execFile);
const ROUTED = 'order.unpaid';
const HTTP = 'order.http';
const CODE = 'order.code';
const N = 20_000;
const POISON = 5001; // odd: orders_b

let pgB: PostgresServer;
let center: TestDatabase;
let ordersA: TestDatabase;
let centerPool: pg.Pool;
let poolA: pg.Pool;
let poolB: pg.Pool;
let configPath: string;
let env: Record<string, string | undefined>;
let alertServer: Server;
let httpServer: Server;
const alerts: { type: string; details: Record<string, unknown> }[] = [];
/** What the HTTP endpoint does with each POST, in order; then it applies. */
const httpScript: ('503' | '401' | 'malformed' | 'slow' | 'ok')[] = [];
const posts: { key: string | undefined; items: number; answer: string }[] = [];
const procs: CliProcess[] = [];

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
}

async function count(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(sql, params);
  return Number(rows[0]?.n ?? 0);
}

function spawn(role: 'coordinator' | 'worker', name: string, failpoints?: string): CliProcess {
  const p = spawnCli(name, [role, '--config', configPath], { ...env, TC_FAILPOINTS: failpoints });
  procs.push(p);
  return p;
}

/** Every due timeout of these kinds final and every scan reduced. */
async function drained(kinds: string[], timeoutMs: number): Promise<void> {
  await waitUntil(
    `timeouts of ${kinds.join(', ')} final and scans reduced`,
    async () =>
      (await count(
        centerPool,
        `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE kind = ANY($1) AND due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed')`,
        [kinds],
      )) === 0 && (await count(centerPool, `SELECT count(*) AS n FROM timeout_center.scans WHERE state <> 'reduced'`)) === 0,
    timeoutMs,
    250,
  ).catch(async (err: unknown) => {
    const { rows } = await centerPool.query(
      `SELECT state, target, count(*)::int AS n, max(attempts) AS attempts, min(error_sample) AS err FROM timeout_center.shards WHERE state IN ('queued', 'running') GROUP BY 1, 2`,
    );
    const { rows: t } = await centerPool.query(
      `SELECT kind, state, count(*)::int AS n, min(available_at - now()) AS next FROM timeout_center.all_timeouts WHERE state NOT IN ('done', 'cancelled', 'failed') GROUP BY 1, 2`,
    );
    const logs = procs.flatMap((p) =>
      p.lines
        .filter((l) => (l.level ?? 0) >= 40)
        .slice(-8)
        .map((l) => `${p.name}: ${JSON.stringify(l).slice(0, 400)}`),
    );
    throw new Error(`${(err as Error).message}\nopen shards: ${JSON.stringify(rows)}\ntimeouts: ${JSON.stringify(t)}\n${logs.join('\n')}`);
  });
}

/** I2/I3 in one business database: no order changed twice, no paid order closed. */
async function businessInvariants(pool: pg.Pool): Promise<{ doubled: number; wrong: number; closed: number; markers: number }> {
  const { rows } = await pool.query<{ doubled: number; wrong: number; closed: number; markers: number }>(`
    SELECT (SELECT count(*) FROM (SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1) x)::int AS doubled,
           (SELECT count(*) FROM order_transitions WHERE from_status = 'paid')::int AS wrong,
           (SELECT count(*) FROM order_transitions WHERE to_status = 'closed')::int AS closed,
           (SELECT count(*) FROM timeout_center.markers)::int AS markers`);
  return rows[0]!;
}

/** The center and both business databases agree: applied timeouts = orders closed, per database. */
async function expectInvariants(): Promise<void> {
  const a = await businessInvariants(poolA);
  const b = await businessInvariants(poolB);
  expect(a).toMatchObject({ doubled: 0, wrong: 0 });
  expect(b).toMatchObject({ doubled: 0, wrong: 0 });
  // A marker is deleted after the center recorded its shard, best effort: one whose delete met its
  // database down (orders_b stopped for 10 s) stays, harmless (a recorded shard's marker is never
  // read again). Every marker left belongs to a shard the center recorded.
  for (const pool of [poolA, poolB]) {
    const shards = (await pool.query<{ id: string }>('SELECT shard_id AS id FROM timeout_center.markers')).rows.map((r) => Number(r.id));
    const unrecorded = await count(
      centerPool,
      `SELECT count(*) AS n FROM unnest($1::bigint[]) id LEFT JOIN timeout_center.shards sh USING (id) WHERE sh.state IS DISTINCT FROM 'done'`,
      [shards],
    );
    expect(unrecorded, `markers of unrecorded shards (left: ${shards.join(', ')})`).toBe(0);
  }
  const lost = await count(
    centerPool,
    `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed')`,
  );
  expect(lost, 'I1: every due timeout final').toBe(0);
  const mismatch = await count(
    centerPool,
    `SELECT ((SELECT coalesce(sum(failed), 0) FROM timeout_center.scans WHERE state = 'reduced') - (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed'))::int AS n`,
  );
  expect(mismatch, 'I4: reduce totals honest').toBe(0);
  // Applied per database, from the center's record, equals the closes in that database (the
  // routed kind by parity; the HTTP service and the code handler close orders in orders_a).
  const { rows } = await centerPool.query<{ db: string; n: number }>(
    `SELECT CASE WHEN kind <> $1 OR biz_id::bigint % 2 = 0 THEN 'a' ELSE 'b' END AS db, count(*)::int AS n
       FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied' GROUP BY 1`,
    [ROUTED],
  );
  const applied = Object.fromEntries(rows.map((r) => [r.db, r.n]));
  expect(applied['a'] ?? 0, 'applied in orders_a = closed in orders_a').toBe(a.closed);
  expect(applied['b'] ?? 0, 'applied in orders_b = closed in orders_b').toBe(b.closed);
}

async function seedOrders(pool: pg.Pool, from: number, to: number, parity: 0 | 1): Promise<void> {
  await pool.query(
    `INSERT INTO orders (id, status, poison)
     SELECT g, CASE WHEN g % 10 = 0 THEN 'paid' ELSE 'unpaid' END, g = $3 FROM generate_series($1::bigint, $2::bigint) g WHERE g % 2 = $4`,
    [from, to, POISON, parity],
  );
}

async function seedTimeouts(kind: string, from: number, to: number, spreadMs = 0): Promise<void> {
  await centerPool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $1, g::text, now() + $4::float8 * (g - $2) / greatest($3 - $2, 1) * interval '1 millisecond' FROM generate_series($2::bigint, $3::bigint) g`,
    [kind, from, to, spreadMs],
  );
}

beforeAll(async () => {
  pgB = await startPostgres();
  center = await createTestDatabase('biz-center');
  ordersA = await createTestDatabase('biz-orders-a');
  const admin = quietPool(pgB.url(), 3);
  await admin.query('CREATE DATABASE orders_b');
  await admin.end();
  centerPool = quietPool(center.url, 3);
  poolA = quietPool(ordersA.url, 3);
  poolB = quietPool(pgB.url('orders_b'), 3);
  await createOrdersSchema(poolA);
  await createOrdersSchema(poolB);

  alertServer = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      alerts.push(JSON.parse(body) as { type: string; details: Record<string, unknown> });
      res.end('ok');
    });
  });
  const alertPort = await listen(alertServer);
  // The HTTP kind's service: closes the orders it is sent in orders_a, as its script says.
  httpServer = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const items = (JSON.parse(body) as { items: { bizId: string }[] }).items;
      const answer = httpScript.shift() ?? 'ok';
      posts.push({ key: req.headers['idempotency-key'] as string | undefined, items: items.length, answer });
      if (answer === '503') return void res.writeHead(503, { 'retry-after': '1' }).end('busy');
      if (answer === '401') return void res.writeHead(401).end('token expired');
      if (answer === 'malformed') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"applied": "not a list"}');
      const reply = () =>
        poolA
          .query<{ id: string }>("UPDATE orders SET status = 'closed' WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id::text", [
            items.map((i) => i.bizId),
          ])
          .then(({ rows }) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ applied: rows.map((r) => r.id) })))
          .catch(() => res.writeHead(500).end());
      if (answer === 'slow') setTimeout(() => res.destroyed || res.writeHead(200).end('{"applied": []}'), 4000);
      else void reply();
    });
  });
  const httpPort = await listen(httpServer);

  // The code handler: its first call ignores its signal, sleeps past the limit, then tries to
  // close the orders on the connection it was given (destroyed by then).
  const dir = mkdtempSync(join(tmpdir(), 'tc-code-'));
  writeFileSync(
    join(dir, 'close.mjs'),
    `let calls = 0;
export default async function close(items, ctx) {
  calls += 1;
  if (calls === 1) await new Promise((r) => setTimeout(r, 2500));
  const { rows } = await ctx.client.query("UPDATE orders SET status = 'closed' WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id::text", [items.map((i) => i.bizId)]);
  return rows.map((r) => r.id);
}
`,
  );

  const config: ConfigInput = {
    redisKeyPrefix: testKeyPrefix('biz'),
    poolSize: 3,
    businessDatabases: {
      orders_a: { url: ordersA.url, poolSize: 3 },
      orders_b: { urlEnv: 'ORDERS_B_URL', poolSize: 3 },
    },
    breaker: { consecutiveFailures: 3, halfOpenAfterMs: 2000, maxRetryDelayMs: 3000 },
    kinds: {
      [ROUTED]: {
        shardSize: 500,
        maxAttempts: 3,
        backoffMs: 200,
        timeLimitMs: 2000,
        handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: ['orders_a', 'orders_b'] } },
      },
      [HTTP]: { shardSize: 100, maxAttempts: 2, backoffMs: 200, timeLimitMs: 1000, handler: { type: 'http', url: `http://127.0.0.1:${httpPort}/close` } },
      [CODE]: {
        shardSize: 100,
        maxAttempts: 2,
        backoffMs: 200,
        timeLimitMs: 1000,
        handler: { type: 'code', module: join(dir, 'close.mjs'), database: 'orders_a' },
      },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: 4000, blockMs: 200, concurrency: 2, drainTimeoutMs: 3000 },
    alerts: { lagSlaMs: 600_000, webhookUrl: `http://127.0.0.1:${alertPort}/alerts` },
  };
  configPath = writeConfig(config);
  env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL, ORDERS_B_URL: pgB.url('orders_b'), TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env);
  if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
}, 120_000);

afterAll(async () => {
  await killAll();
  for (const p of [centerPool, poolA, poolB]) await p?.end().catch(() => {});
  await center?.drop().catch(() => {});
  await ordersA?.drop().catch(() => {});
  alertServer?.close();
  httpServer?.close();
  await stopAllServers();
});

describe('business databases the center does not own', () => {
  it('migrate names a business database it cannot reach', async () => {
    // Done for the others, exit 1: the summary names the one it could not reach, with its URL.
    const bad = await runCli(['migrate', '--config', configPath], { ...env, ORDERS_B_URL: 'postgres://postgres@127.0.0.1:1/orders_b' });
    expect(bad.code).toBe(1);
    const summary = bad.lines.map((l) => String(l.msg)).join('\n');
    expect(summary).toMatch(/^orders_b +business database +NOT DONE: .*ECONNREFUSED.* +postgres:\/\/postgres@127\.0\.0\.1:1\/orders_b$/m);
    expect(summary).toMatch(/^orders_a +business database +marker table ready /m);
  });

  it('20,000 orders over two databases: each unpaid order closed once, the poison row isolated, a worker killed between the two commits recorded from its marker', async () => {
    await seedOrders(poolA, 1, N, 0);
    await seedOrders(poolB, 1, N, 1);
    await seedTimeouts(ROUTED, 1, N);
    const started = Date.now();
    const doomed = spawn('worker', 'worker-killed', 'external.after-apply-commit=1*kill');
    spawn('worker', 'worker-2');
    await doomed.waitForMsg('worker started');
    spawn('coordinator', 'coordinator');
    const exit = await doomed.exited;
    expect(exit.signal).toBe('SIGKILL');
    const replacement = spawn('worker', 'worker-3');
    await drained([ROUTED], 90_000);
    const drainMs = Date.now() - started;

    // The killed run's shard was recorded from its marker by a later run, as applied.
    const fromMarker = procs.flatMap((p) => linesMatching(p, /recorded what it did from its marker/));
    expect(fromMarker.length).toBeGreaterThanOrEqual(1);
    expect(Number(fromMarker[0]!['applied'])).toBeGreaterThan(0);
    expect(replacement.alive).toBe(true);

    const { rows } = await centerPool.query<{ result: string | null; state: string; n: number }>(
      `SELECT result, state, count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 GROUP BY 1, 2`,
      [ROUTED],
    );
    const by = Object.fromEntries(rows.map((r) => [`${r.state}/${r.result ?? '-'}`, r.n]));
    expect(by).toEqual({ 'done/applied': N * 0.9 - 1, 'done/skipped': N * 0.1, 'failed/-': 1 });
    const poison = await centerPool.query(`SELECT state, attempts, last_error FROM timeout_center.all_timeouts WHERE biz_id = $1`, [String(POISON)]);
    expect(poison.rows[0]).toMatchObject({ state: 'failed', attempts: 3 });
    expect(String(poison.rows[0].last_error)).toMatch(/poison row/);
    // Every shard ran against exactly one database.
    const targets = await centerPool.query<{ target: string; n: number }>(
      `SELECT target, count(*)::int AS n FROM timeout_center.shards WHERE kind = $1 GROUP BY 1 ORDER BY 1`,
      [ROUTED],
    );
    expect(targets.rows.map((r) => r.target)).toEqual(['orders_a', 'orders_b']);
    await expectInvariants();
    report('business-databases e2e', { timeouts: N, drainMs, shards: targets.rows, recordedFromMarker: fromMarker.length });
  }, 150_000);

  it('orders_b stopped for 10 s mid-run: shards wait and retry, nothing fails for good, the breaker opens and closes', async () => {
    const from = N + 1;
    const to = N + 6000;
    await seedOrders(poolA, from, to, 0);
    await seedOrders(poolB, from, to, 1);
    const failedBefore = await count(centerPool, `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'failed'`);
    await seedTimeouts(ROUTED, from, to, 8000);
    await sleep(1000);
    await pgB.pgCtl('-w', '-m', 'fast', 'stop');
    const stoppedAt = Date.now();
    // While it is down: the breaker shows open in the table `status` reads, and in `status`.
    await waitUntil(
      'a breaker open for orders_b',
      async () => (await count(centerPool, `SELECT count(*) AS n FROM timeout_center.circuit_breakers WHERE target = 'orders_b' AND state = 'open'`)) > 0,
      15_000,
      200,
    );
    // status names the open breaker as a problem: exit 1 (execFile rejects with the output).
    const { stdout } = await run(process.execPath, [CLI, 'status', '--json'], { env: { ...process.env, ...env } as NodeJS.ProcessEnv }).catch(
      (err: { code?: number; stdout: string }) => {
        expect(err.code).toBe(1);
        return err;
      },
    );
    const { openBreakers } = JSON.parse(stdout) as { openBreakers: { target: string; state: string }[] };
    expect(openBreakers.some((b) => b.target === 'orders_b')).toBe(true);
    await sleep(Math.max(0, 10_000 - (Date.now() - stoppedAt)));
    await pgB.pgCtl('-w', 'start');
    await drained([ROUTED], 90_000);
    await waitUntil(
      'circuit_closed alert for orders_b',
      () => alerts.some((a) => a.type === 'circuit_closed' && a.details['target'] === 'orders_b'),
      30_000,
      200,
    );
    expect(alerts.some((a) => a.type === 'circuit_open' && a.details['target'] === 'orders_b')).toBe(true);
    expect(await count(centerPool, `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'failed'`), 'nothing failed for good').toBe(
      failedBefore,
    );
    const retried = await count(
      centerPool,
      `SELECT coalesce(sum(retried_count), 0)::int AS n FROM timeout_center.shards WHERE target = 'orders_b' AND error_sample IS NOT NULL`,
    );
    expect(retried).toBeGreaterThan(0);
    const applied = await count(
      centerPool,
      `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id::bigint BETWEEN $2 AND $3 AND result = 'applied'`,
      [ROUTED, from, to],
    );
    expect(applied).toBe(6000 * 0.9);
    await expectInvariants();
    report('business-databases outage', { stoppedMs: 10_000, retriedTimeouts: retried, alerts: alerts.map((a) => a.type) });
  }, 150_000);

  it('an HTTP endpoint answering 503, 401, a malformed body, then too slowly: bounded POSTs, nothing failed, a late cancel answers at once', async () => {
    const from = 100_001;
    const to = 100_600; // even and odd: the HTTP service closes them in orders_a
    await poolA.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::bigint, $2::bigint) g`, [from, to]);
    httpScript.push('503', '503', '401', '401', 'malformed', 'malformed', 'slow', 'slow');
    await seedTimeouts(HTTP, from, to);
    // A payer cancels while the calls are failing or hanging: the claim committed before the
    // call, so the cancel takes no lock the call holds, and it answers at once that it is too
    // late (UPDATE 0: a worker holds the timeout; the payment's guarded UPDATE decides).
    await waitUntil('a slow POST in flight', () => posts.some((p) => p.answer === 'slow'), 60_000, 20);
    const cancelStarted = performance.now();
    const cancelled = await centerPool.query(
      `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = $1 AND state IN ('pending', 'dispatched') AND biz_id = (SELECT biz_id FROM timeout_center.timeouts WHERE kind = $1 AND state = 'dispatched' LIMIT 1) RETURNING id`,
      [HTTP],
    );
    const cancelMs = performance.now() - cancelStarted;
    expect(cancelled.rowCount, 'a dispatched timeout cannot be cancelled').toBe(0);
    expect(cancelMs).toBeLessThan(900); // the slow call holds 4 s; one statement, not the call
    await drained([HTTP], 90_000);
    const { rows } = await centerPool.query<{ state: string; n: number }>(
      `SELECT state, count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 GROUP BY 1`,
      [HTTP],
    );
    const by = Object.fromEntries(rows.map((r) => [r.state, r.n]));
    expect(by['failed'] ?? 0, 'nothing failed for good').toBe(0);
    expect(by['done']).toBe(600);
    // 8 scripted failures, then 6 shards of 100 applied: a handful of POSTs, never a split.
    expect(posts.length).toBeLessThanOrEqual(8 + 6 + 4);
    expect(posts.every((p) => p.items === 100 || p.items < 100)).toBe(true);
    expect(posts.every((p) => p.key && /^\d+-\d+$/.test(p.key))).toBe(true);
    const a = await businessInvariants(poolA);
    expect(a).toMatchObject({ doubled: 0, wrong: 0 });
    report('business-databases http', { posts: posts.length, cancelMs: Math.round(cancelMs) });
  }, 120_000);

  it('a code handler that ignores its signal is aborted, its connection destroyed, its late write lost; the shard applies once', async () => {
    const from = 200_001;
    const to = 200_100;
    await poolA.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::bigint, $2::bigint) g`, [from, to]);
    await seedTimeouts(CODE, from, to);
    await drained([CODE], 60_000);
    const { rows } = await centerPool.query<{ state: string; result: string | null; n: number }>(
      `SELECT state, result, count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 GROUP BY 1, 2`,
      [CODE],
    );
    expect(rows).toEqual([{ state: 'done', result: 'applied', n: 100 }]);
    // At least one worker ran past the limit (each worker process's first call sleeps).
    const timedOut = await count(centerPool, `SELECT count(*) AS n FROM timeout_center.shards WHERE kind = $1 AND error_sample LIKE '%time limit%'`, [CODE]);
    expect(timedOut).toBeGreaterThanOrEqual(1);
    // Let the late write try (it sleeps 2.5 s), then check it changed nothing more.
    await sleep(3000);
    await expectInvariants();
  }, 90_000);
});
