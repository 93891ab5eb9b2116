// A kind nobody serves cannot stall the others (issue 24, point 4), with real processes: kinds A and
// X, a coordinator with maxInFlightShards 4, one worker serving A only (worker.kinds), and an X
// timeout due every 100 ms. X's shards have no live worker to take them: they must not fill the
// bound. A's 1,000 due timeouts drain on time while X waits with one shard at most; the coordinator
// warns, alerts (kind_unserved) and `status` names X; a worker serving X then drains it and the
// alert clears (kind_served).
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { CLI, killAll, runCli, spawnCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { report, waitUntil } from './harness.js';

const run = promisify(execFile);
const A = 'order.a';
const X = 'order.x';

let db: TestDatabase;
let pool: pg.Pool;
let alertServer: Server;
const alerts: { type: string; details: Record<string, unknown> }[] = [];
let env: Record<string, string | undefined>;
let configPath: string;
let workerAConfig: string;
let workerXConfig: string;

beforeAll(async () => {
  db = await createTestDatabase('unserved-kind');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  pool.on('error', () => {});
  await createOrdersSchema(pool);
  alertServer = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      alerts.push(JSON.parse(body) as { type: string; details: Record<string, unknown> });
      res.end('ok');
    });
  });
  const alertPort = await new Promise<number>((resolve) => alertServer.listen(0, '127.0.0.1', () => resolve((alertServer.address() as { port: number }).port)));
  const config: ConfigInput = {
    redisKeyPrefix: testKeyPrefix('unserved'),
    poolSize: 3,
    kinds: {
      [A]: { shardSize: 100, timeLimitMs: 2000, handler: { type: 'sql', sql: CLOSE_SQL } },
      [X]: { shardSize: 100, timeLimitMs: 2000, handler: { type: 'sql', sql: CLOSE_SQL } },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 4, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: 3000, blockMs: 200, concurrency: 2 },
    alerts: { lagSlaMs: 600_000, webhookUrl: `http://127.0.0.1:${alertPort}/alerts` },
  };
  configPath = writeConfig(config);
  workerAConfig = writeConfig({ ...config, worker: { ...config.worker, kinds: [A] } });
  workerXConfig = writeConfig({ ...config, worker: { ...config.worker, kinds: [X] } });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env);
  if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
}, 60_000);

afterAll(async () => {
  await killAll();
  await pool?.end().catch(() => {});
  alertServer?.close();
  await db?.drop().catch(() => {});
});

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(sql, params);
  return Number(rows[0]?.n ?? 0);
}

describe('a kind nobody serves', () => {
  it('cannot stall the others: A drains on time while X waits with one shard, named by a warning, an alert and status', async () => {
    const workerA = spawnCli('worker-a', ['worker', '--config', workerAConfig], env);
    await workerA.waitForMsg('worker started');
    const coordinator = spawnCli('coordinator', ['coordinator', '--config', configPath], env);
    // An X timeout due every 100 ms, for the whole test.
    let nextX = 1_000_000;
    const xFeed = setInterval(() => {
      const id = nextX++;
      void pool
        .query(
          `WITH o AS (INSERT INTO orders (id, status) VALUES ($1, 'unpaid') RETURNING id)
                INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $2, id::text, now() FROM o`,
          [id, X],
        )
        .catch(() => {});
    }, 100);
    try {
      // X's shards queue up with nobody to take them: wait until the coordinator has seen them.
      await waitUntil(
        'an X shard waiting',
        async () => (await count(`SELECT count(*) AS n FROM timeout_center.shards WHERE kind = $1 AND state = 'queued'`, [X])) > 0,
        20_000,
        100,
      );
      await new Promise((r) => setTimeout(r, 2000));
      await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, 1000) g`);
      const started = Date.now();
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() FROM generate_series(1, 1000) g`, [A]);
      await waitUntil(
        "A's 1,000 timeouts closed",
        async () => (await count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE kind = $1 AND state = 'done'`, [A])) === 1000,
        15_000,
        50,
      );
      const drainMs = Date.now() - started;
      const xQueued = await count(`SELECT count(*) AS n FROM timeout_center.shards WHERE kind = $1 AND state IN ('queued', 'running')`, [X]);
      expect(xQueued, 'X waits with one shard at most').toBeLessThanOrEqual(1);
      expect(await count(`SELECT count(*) AS n FROM orders WHERE id <= 1000 AND status = 'closed'`)).toBe(1000);

      // Named: the coordinator's warning, the alert, and status.
      await coordinator.waitForMsg(/no live worker serves order\.x/, 10_000);
      await waitUntil('kind_unserved alert for X', () => alerts.some((a) => a.type === 'kind_unserved' && a.details['kind'] === X), 10_000, 50);
      expect(
        alerts.some((a) => a.type === 'kind_unserved' && a.details['kind'] === A),
        'A is served',
      ).toBe(false);
      // A kind no worker serves is a problem status names: exit 1 (execFile rejects with the output).
      const exit1 = (err: { code?: number; stdout: string }) => {
        expect(err.code).toBe(1);
        return err;
      };
      const { stdout } = await run(process.execPath, [CLI, 'status', '--json'], { env: { ...process.env, ...env } as NodeJS.ProcessEnv }).catch(exit1);
      const status = JSON.parse(stdout) as { unservedKinds: string[] };
      expect(status.unservedKinds).toEqual([X]);
      const text = await run(process.execPath, [CLI, 'status'], { env: { ...process.env, ...env } as NodeJS.ProcessEnv }).catch(exit1);
      expect(text.stdout).toMatch(/No live worker serves order\.x: its timeouts wait/);

      // A worker for X: X drains, and the alert clears.
      spawnCli('worker-x', ['worker', '--config', workerXConfig], env);
      clearInterval(xFeed);
      await waitUntil(
        'X drained',
        async () => (await count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE kind = $1 AND state IN ('pending', 'dispatched')`, [X])) === 0,
        20_000,
        100,
      );
      await waitUntil('kind_served alert for X', () => alerts.some((a) => a.type === 'kind_served' && a.details['kind'] === X), 10_000, 50);
      report('unserved kind', { aTimeouts: 1000, aDrainMs: drainMs, xShardsWaiting: xQueued, alerts: alerts.map((a) => a.type) });
    } finally {
      clearInterval(xFeed);
    }
  }, 90_000);
});
