// /metrics, /healthz and /readyz of real processes. A coordinator (leader), a standby and a worker
// serve on free ports (--port 0). The worker reaches PostgreSQL and Redis through TCP proxies run
// by this test, so the test can cut either: /readyz must turn 503 quickly (never hang) and name
// the dependency, /healthz stays 200 (the process itself is fine), and readiness comes back when
// the connection does. The metrics the issue lists exist and carry the right values.
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VERSION } from '../../src/version.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { metric } from '../helpers/metrics-text.js';

/** Forwards 127.0.0.1:<port> to a target; stop() drops every connection and stops listening. */
class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  port = 0;
  constructor(private readonly target: { host: string; port: number }) {}

  async start(port = this.port): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.server = server;
    this.port = (server.address() as net.AddressInfo).port;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

async function get(port: number, path: string): Promise<{ status: number; body: string; ms: number }> {
  const started = Date.now();
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: await res.text(), ms: Date.now() - started };
}

const portOf = async (p: CliProcess) => Number((await p.waitForMsg('serving /metrics, /healthz, /readyz', 30_000))['port']);

describe('metrics and health endpoints (real processes)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let env: Record<string, string>;
  let pgProxy: TcpProxy;
  let redisProxy: TcpProxy;
  let leader: CliProcess;
  let standby: CliProcess;
  let worker: CliProcess;
  let ports: { leader: number; standby: number; worker: number };
  const N = 1200;

  beforeAll(async () => {
    db = await createTestDatabase('health');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    const configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix('health'),
      kinds: { 'order.unpaid': { shardSize: 200, handler: { type: 'sql', sql: CLOSE_SQL } } },
      coordinator: { lockTtlMs: 3000, lagCheckIntervalMs: 200 },
      worker: { concurrency: 2, leaseMs: 15_000 },
    });
    env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);

    const dbUrl = new URL(db.url);
    const redisUrl = new URL(TEST_REDIS_URL);
    pgProxy = new TcpProxy({ host: dbUrl.hostname, port: Number(dbUrl.port || 5432) });
    redisProxy = new TcpProxy({ host: redisUrl.hostname, port: Number(redisUrl.port || 6379) });
    await pgProxy.start(0);
    await redisProxy.start(0);

    leader = spawnCli('coordinator-1', ['coordinator', '--port', '0'], env);
    await leader.waitForMsg('became leader', 20_000);
    standby = spawnCli('coordinator-2', ['coordinator', '--port', '0'], env);
    const proxiedDb = new URL(db.url);
    proxiedDb.host = `127.0.0.1:${pgProxy.port}`;
    const proxiedRedis = new URL(TEST_REDIS_URL);
    proxiedRedis.host = `127.0.0.1:${redisProxy.port}`;
    // Due rows before any worker runs: the backlog shows on the leader.
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, $1::int) g`, [N]);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, now() - interval '2 s' FROM generate_series(1, $1::int) g`,
      [N],
    );
    ports = { leader: await portOf(leader), standby: await portOf(standby), worker: 0 };
    worker = spawnCli('worker', ['worker', '--port', '0'], { ...env, DATABASE_URL: proxiedDb.toString(), REDIS_URL: proxiedRedis.toString() });
    // Not started yet: give the leader a moment to measure the backlog first (lagCheckIntervalMs 200).
    ports.worker = await portOf(worker);
  });

  afterAll(async () => {
    for (const p of [worker, standby, leader]) await p?.stop().catch(() => {});
    const leaked = await killAll();
    await pgProxy?.stop();
    await redisProxy?.stop();
    await pool?.end();
    await db?.drop();
    expect(leaked, 'processes still running after the test').toEqual([]);
  });

  it('every process: /healthz 200, /readyz 200 with its checks; the coordinators say who leads', async () => {
    for (const port of Object.values(ports)) {
      const h = await get(port, '/healthz');
      expect(h).toMatchObject({ status: 200 });
      expect(JSON.parse(h.body)).toEqual({ status: 'ok' });
    }
    const l = await get(ports.leader, '/readyz');
    expect(l.status).toBe(200);
    expect(JSON.parse(l.body)).toMatchObject({
      status: 'ready',
      postgres: { ok: true },
      redis: { ok: true },
      coordinator: { ok: true, leader: true },
      // the schema still runs this version (docs/upgrading.md)
      schema: { ok: true, version: VERSION, state: 'current' },
    });
    const s = await get(ports.standby, '/readyz');
    expect(s.status).toBe(200); // a standby is ready: it takes over when the leader goes
    expect(JSON.parse(s.body)).toMatchObject({ status: 'ready', coordinator: { ok: true, leader: false } });
    const w = await get(ports.worker, '/readyz');
    expect(w.status).toBe(200);
    const wb = JSON.parse(w.body);
    expect(wb).toMatchObject({ status: 'ready', postgres: { ok: true }, redis: { ok: true } });
    expect(wb.coordinator).toBeUndefined();
    expect((await get(ports.worker, '/nope')).status).toBe(404);
  });

  it('/metrics: the metrics the dashboard reads exist and carry the pipeline', async () => {
    // Drained by the worker.
    const deadline = Date.now() + 60_000;
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE state <> 'done'`);
      if (rows[0].n === 0) break;
      if (Date.now() > deadline) throw new Error(`not drained: ${rows[0].n} left`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // The worker: outcomes by kind, lateness histogram, shard durations, busy slots.
    const w = (await get(ports.worker, '/metrics')).body;
    expect(metric(w, 'tc_timeouts_total', { kind: 'order.unpaid', outcome: 'applied', role: 'worker' })).toBe(N);
    const { rows: doneShards } = await pool.query(`SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = 'order.unpaid' AND state = 'done'`);
    expect(doneShards[0].n).toBeGreaterThan(0);
    expect(metric(w, 'tc_shards_total', { kind: 'order.unpaid', outcome: 'done' })).toBe(doneShards[0].n);
    expect(metric(w, 'tc_lateness_seconds_count', { kind: 'order.unpaid' })).toBe(N);
    // Due 2 s before the worker existed: every timeout is at least 2 s late.
    expect(metric(w, 'tc_lateness_seconds_bucket', { kind: 'order.unpaid', le: '1' })).toBe(0);
    expect(metric(w, 'tc_shard_duration_seconds_count', { kind: 'order.unpaid' })).toBe(doneShards[0].n);
    expect(metric(w, 'tc_worker_busy_slots')).toBe(0);
    expect(w).toMatch(/^tc_process_process_resident_memory_bytes\{role="worker"\} \d+/m);
    expect(w).toMatch(new RegExp(`^tc_build_info\\{version="${VERSION.replace(/\./g, '\\.')}",schema="\\d+",role="worker"\\} 1$`, 'm'));

    // The leader: leadership, claims, scans and their durations, backlog and lag, in flight.
    let l = (await get(ports.leader, '/metrics')).body;
    for (let i = 0; i < 20 && metric(l, 'tc_scans_total', { result: 'ok' }) === undefined; i++) {
      await new Promise((r) => setTimeout(r, 250));
      l = (await get(ports.leader, '/metrics')).body;
    }
    expect(metric(l, 'tc_leader', { role: 'coordinator' })).toBe(1);
    expect(metric(l, 'tc_leader_epoch')).toBeGreaterThanOrEqual(1);
    expect(metric(l, 'tc_planned_total')).toBe(N);
    expect(metric(l, 'tc_claimed_total'), 'the deprecated name still works this release').toBe(N);
    expect(metric(l, 'tc_scans_total', { result: 'ok' })).toBeGreaterThanOrEqual(1);
    expect(metric(l, 'tc_scan_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    expect(metric(l, 'tc_shards_in_flight')).toBeDefined();
    for (const name of ['tc_backlog', 'tc_backlog_oldest_lag_seconds', 'tc_reclaims_total', 'tc_fenced_writes_total', 'tc_alerts_total', 'tc_purged_total']) {
      expect(l, name).toContain(`# TYPE ${name} `);
    }
    // While the rows waited for a worker, the leader measured them as backlog with their lag (rows
    // a shard is applying stay pending until it commits). Drained, the next measurement shows no
    // backlog left.
    for (let i = 0; i < 40 && (metric(l, 'tc_backlog', { kind: 'order.unpaid', state: 'pending' }) ?? 0) > 0; i++) {
      await new Promise((r) => setTimeout(r, 250));
      l = (await get(ports.leader, '/metrics')).body;
    }
    expect(metric(l, 'tc_backlog', { kind: 'order.unpaid', state: 'pending' }) ?? 0).toBe(0);
    // The standby exports leader 0 and no backlog of its own.
    const s = (await get(ports.standby, '/metrics')).body;
    expect(metric(s, 'tc_leader')).toBe(0);
    expect(metric(s, 'tc_backlog', { kind: 'order.unpaid', state: 'pending' })).toBeUndefined();
  });

  it('the backlog and oldest-lag gauges follow due rows nobody has finished', async () => {
    // Rows due now, with the worker's Redis cut so nobody applies them: claimed, in flight, late.
    await redisProxy.stop();
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::int, $1::int + 99) g`, [N + 1]);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, now() - interval '5 s' FROM generate_series($1::int, $1::int + 99) g`,
      [N + 1],
    );
    let l: string;
    const deadline = Date.now() + 10_000;
    for (;;) {
      l = (await get(ports.leader, '/metrics')).body;
      const inFlight = metric(l, 'tc_backlog', { kind: 'order.unpaid', state: 'in_flight' }) ?? 0;
      const pending = metric(l, 'tc_backlog', { kind: 'order.unpaid', state: 'pending' }) ?? 0;
      if (inFlight + pending === 100) break;
      if (Date.now() > deadline)
        throw new Error(
          `backlog gauge never showed 100:\n${l
            .split('\n')
            .filter((x) => x.startsWith('tc_backlog'))
            .join('\n')}`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(metric(l, 'tc_backlog_oldest_lag_seconds', { kind: 'order.unpaid' })).toBeGreaterThanOrEqual(5);
    expect(metric(l, 'tc_shards_in_flight')).toBeGreaterThanOrEqual(1);
    await redisProxy.start();
  });

  it('/readyz turns 503 fast (no hang) when Redis or PostgreSQL is unreachable, /healthz stays 200, and recovers', async () => {
    // Ready again after the Redis cut of the previous test.
    await waitReady(ports.worker, 200);

    await redisProxy.stop();
    const noRedis = await waitReady(ports.worker, 503);
    expect(noRedis.ms).toBeLessThan(3000);
    const body = JSON.parse(noRedis.body);
    expect(body).toMatchObject({ status: 'not ready', postgres: { ok: true }, redis: { ok: false } });
    expect(body.redis.error).toBeTruthy();
    expect((await get(ports.worker, '/healthz')).status).toBe(200);
    await redisProxy.start();
    await waitReady(ports.worker, 200);

    await pgProxy.stop();
    const noPg = await waitReady(ports.worker, 503);
    expect(noPg.ms).toBeLessThan(3000);
    expect(JSON.parse(noPg.body)).toMatchObject({ status: 'not ready', postgres: { ok: false }, redis: { ok: true } });
    expect((await get(ports.worker, '/healthz')).status).toBe(200);
    await pgProxy.start();
    await waitReady(ports.worker, 200);
    console.log(`readiness: 503 in ${noRedis.ms} ms without Redis, ${noPg.ms} ms without PostgreSQL`);

    // Everything applied in the end (the rows of the backlog test too), each order once.
    const deadline = Date.now() + 60_000;
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE state <> 'done'`);
      if (rows[0].n === 0) break;
      if (Date.now() > deadline) {
        const { rows: shards } = await pool.query(
          `SELECT id, state, owner, attempts, publish_count, published_at, lease_expires_at, now() AS now FROM timeout_center.shards WHERE state <> 'done'`,
        );
        throw new Error(
          `not drained after the cuts: ${rows[0].n} left; shards ${JSON.stringify(shards)}; worker alive ${worker.alive}; ` +
            `worker log tail ${JSON.stringify(worker.lines.slice(-15))} stderr ${worker.stderr.slice(-1000)}`,
        );
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM (SELECT order_id FROM order_transitions GROUP BY 1 HAVING count(*) > 1) x`);
    expect(rows[0].n).toBe(0);
  });
});

async function waitReady(port: number, status: 200 | 503, timeoutMs = 20_000): Promise<{ status: number; body: string; ms: number }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await get(port, '/readyz');
    if (r.status === status) return r;
    if (Date.now() > deadline) throw new Error(`/readyz on ${port} never returned ${status}; last: ${r.status} ${r.body}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}
