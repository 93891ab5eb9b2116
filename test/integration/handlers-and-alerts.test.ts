// Code handlers registered in TypeScript, HTTP handlers (one batched POST per shard), and the
// alerts (webhook JSON POST): failed timeouts in a scan, N failed scans in a row, lag over the SLA.
// The runtime runs in this process against the real PostgreSQL and Redis.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, type ConfigInput } from '../../src/config.js';
import { migrate } from '../../src/db/migrate.js';
import { createLogger } from '../../src/observability/logger.js';
import { startRuntime, type Runtime } from '../../src/runtime.js';
import { PermanentError, type ShardItem } from '../../src/worker/handler-contract.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const logger = createLogger('silent');
let db: TestDatabase;
let pool: pg.Pool;
let server: Server;
let baseUrl: string;
const webhook: { type: string; message: string; details: Record<string, unknown> }[] = [];
const httpCalls: { kind: string; shardId: number; items: ShardItem[] }[] = [];

beforeAll(async () => {
  db = await createTestDatabase('handlers');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  await migrate(pool, logger);
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const json = JSON.parse(body);
      if (req.url === '/alerts') {
        webhook.push(json);
        res.writeHead(204).end();
      } else if (req.url === '/close') {
        httpCalls.push(json);
        // Applies even ids, fails ids ending in 7, skips the rest.
        const items = json.items as ShardItem[];
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            applied: items.filter((i) => Number(i.bizId) % 2 === 0).map((i) => i.bizId),
            failed: items.filter((i) => i.bizId.endsWith('7')).map((i) => ({ bizId: i.bizId, error: 'remote says no' })),
          }),
        );
      } else {
        res.writeHead(404).end();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
  await new Promise((r) => server?.close(r));
});

async function start(
  config: Omit<ConfigInput, 'redisKeyPrefix'>,
  roles: { coordinator: boolean; worker: boolean },
  configure?: Parameters<typeof startRuntime>[0]['configureWorker'],
): Promise<Runtime> {
  const loaded = loadConfig({
    object: { redisKeyPrefix: testKeyPrefix('handlers'), logLevel: 'silent', ...config },
    env: { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL },
  });
  return startRuntime({ config: loaded, logger, ...roles, ...(configure ? { configureWorker: configure } : {}) });
}

async function until<T>(fn: () => Promise<T | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function states(kind: string): Promise<Record<string, number>> {
  const { rows } = await pool.query(`SELECT coalesce(result, state) AS s, count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 GROUP BY 1`, [
    kind,
  ]);
  return Object.fromEntries(rows.map((r) => [r.s, r.n]));
}

describe('handlers', () => {
  it('runs a TypeScript handler registered in code, with payloads and the shard transaction', async () => {
    const seen: ShardItem[] = [];
    const runtime = await start(
      { kinds: { 'ts.kind': { shardSize: 50, maxAttempts: 3, handler: { type: 'code' } } } },
      { coordinator: true, worker: true },
      (worker) =>
        worker.registerHandler('ts.kind', async (items, ctx) => {
          seen.push(...items);
          const { rows } = await ctx.client.query<{ now: Date }>('SELECT now()');
          expect(rows[0]!.now).toBeInstanceOf(Date);
          if (items.some((i) => i.bizId === 'bad')) throw new PermanentError('bad id: will never work');
          return items.filter((i) => (i.payload as { apply: boolean }).apply).map((i) => i.bizId);
        }),
    );
    try {
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, payload)
        SELECT 'ts.kind', g::text, now(), jsonb_build_object('apply', g % 3 <> 0) FROM generate_series(1, 120) g
        UNION ALL SELECT 'ts.kind', 'bad', now(), '{"apply": true}'`);
      const s = await until(async () => {
        const s = await states('ts.kind');
        return (s['applied'] ?? 0) + (s['skipped'] ?? 0) + (s['failed'] ?? 0) === 121 && s;
      });
      expect(s).toEqual({ applied: 80, skipped: 40, failed: 1 });
      await until(async () => (await pool.query("SELECT 1 FROM timeout_center.scans WHERE state <> 'reduced'")).rowCount === 0);
      // A permanent error fails at once: no further attempts.
      const { rows } = await pool.query("SELECT attempts, last_error FROM timeout_center.all_timeouts WHERE biz_id = 'bad'");
      expect(rows[0]).toEqual({ attempts: 1, last_error: 'bad id: will never work' });
      expect(seen.find((i) => i.bizId === '3')?.payload).toEqual({ apply: false });
    } finally {
      await runtime.stop();
    }
  });

  it('makes one batched POST per shard to an HTTP handler and records applied, skipped and failed', async () => {
    const runtime = await start(
      { kinds: { 'http.kind': { shardSize: 40, maxAttempts: 1, handler: { type: 'http', url: `${baseUrl}/close` } } } },
      { coordinator: true, worker: true },
    );
    try {
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'http.kind', g::text, now() FROM generate_series(1, 100) g`);
      const s = await until(async () => {
        const s = await states('http.kind');
        return (s['applied'] ?? 0) + (s['skipped'] ?? 0) + (s['failed'] ?? 0) === 100 && s;
      });
      // Let the coordinator reduce this kind's scans before it stops, so a later test's coordinator
      // does not reduce them (and alert on their failures) instead.
      await until(async () => (await pool.query("SELECT 1 FROM timeout_center.scans WHERE state <> 'reduced'")).rowCount === 0);
      // ids ending in 7: 10 failed (7, 17, ... 97, all odd); evens applied (50); the other 40 odds skipped.
      expect(s).toEqual({ applied: 50, skipped: 40, failed: 10 });
      const posted = httpCalls.filter((c) => c.kind === 'http.kind');
      expect(posted.reduce((n, c) => n + c.items.length, 0)).toBe(100);
      expect(posted.length).toBeLessThanOrEqual(100 / 40 + 2); // batched: a handful of POSTs, not 100
    } finally {
      await runtime.stop();
    }
  });
});

describe('alerts', () => {
  it('posts failures, consecutive failed scans and lag over the SLA to the webhook', async () => {
    const kinds = {
      'alert.kind': {
        shardSize: 10,
        maxAttempts: 1,
        handler: {
          type: 'sql' as const,
          sql: "SELECT x::text FROM unnest($1::text[]) x WHERE CASE WHEN x LIKE 'p%' THEN 1 / (length(x) - 3) = 1 ELSE true END",
        },
      },
    };
    const alerts = { webhookUrl: `${baseUrl}/alerts`, consecutiveFailedScans: 2, lagSlaMs: 1000, lagAlertEveryMs: 1000 };
    // Lag: a coordinator alone claims overdue rows that no worker takes.
    const coordinatorOnly = await start({ kinds, alerts, coordinator: { lagCheckIntervalMs: 200 } }, { coordinator: true, worker: false });
    try {
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('alert.kind', 'late-1', now() - interval '5 s')`);
      const lag = await until(async () => webhook.find((a) => a.type === 'lag_sla'));
      expect(lag.message).toMatch(/oldest due alert\.kind timeout is [\d.]+ s late \(SLA 1 s\)/);
      expect(lag.details).toMatchObject({ kind: 'alert.kind', slaSeconds: 1 });
    } finally {
      await coordinatorOnly.stop();
    }
    // Failures in two scans in a row: one poison row per scan.
    const both = await start({ kinds, alerts }, { coordinator: true, worker: true });
    try {
      // The overdue row's scan must be reduced (clean) first, or it would break the streak below.
      await until(
        async () =>
          (await pool.query("SELECT 1 FROM timeout_center.scans WHERE state <> 'reduced'")).rowCount === 0 && (await states('alert.kind'))['applied'] === 1,
      );
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('alert.kind', 'p-1', now()), ('alert.kind', 'ok-1', now())`);
      await until(async () => webhook.filter((a) => a.type === 'scan_failures').length >= 1 && true);
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('alert.kind', 'p-2', now()), ('alert.kind', 'ok-2', now())`);
      const streak = await until(async () => webhook.find((a) => a.type === 'consecutive_failed_scans'));
      expect(streak.message).toMatch(/2 scans in a row ended with failed timeouts/);
      // Alerts are sent concurrently: the streak may arrive before the second scan's own alert.
      const failures = await until(async () => {
        const f = webhook.filter((a) => a.type === 'scan_failures' && JSON.stringify(a.details).includes('alert.kind'));
        return f.length >= 2 && f;
      });
      expect(failures[0]!.message).toMatch(/1 of \d+ timeouts failed for good/);
      expect(JSON.stringify(failures[0]!.details)).toMatch(/division by zero/);
      expect(await states('alert.kind')).toMatchObject({ failed: 2, applied: 3 });
    } finally {
      await both.stop();
    }
  });
});
