// Scenario 5: PostgreSQL goes away under running processes. (a) A private PostgreSQL is stopped
// with -m immediate (a crash: every backend killed, crash recovery on start) mid-run and started
// again 1.5 s later. (b) A worker's backend is terminated with pg_terminate_backend while it sits
// inside its shard transaction. No process may crash on the pool's 'error' event, and the work
// must resume on its own. (c) Connection chaos: random backends of every process terminated
// every 150 ms for 3 s.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { startPostgres, stopAllServers } from '../helpers/servers.js';
import { silentProxyTo, type SilentProxy } from '../helpers/silent-proxy.js';
import { linesMatching, report, Scenario, sleep, waitUntil } from './harness.js';

const N = 3000;
let s: Scenario | undefined;
let proxy: SilentProxy | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
  await proxy?.close();
  proxy = undefined;
});

afterAll(async () => {
  await killAll();
  await stopAllServers();
});

describe('PostgreSQL faults', () => {
  it('PostgreSQL stopped with -m immediate mid-run and started again: every process survives and drains', async () => {
    const server = await startPostgres();
    s = await Scenario.create('fault-pg-immediate', { databaseUrl: server.url() });
    const c = s.coordinator('coordinator');
    await c.waitForMsg('became leader', 15_000);
    const slow = 'worker.after-lease=sleep(200)';
    const workers = [s.worker('worker-1', { failpoints: slow }), s.worker('worker-2', { failpoints: slow })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    await s.seed(N);

    await waitUntil('a few shards done', async () => (await s!.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'done'`)) >= 3, 20_000);
    const running = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state IN ('queued', 'running')`);
    // The test's own pool loses its connections too; drop them before the crash.
    await server.stopImmediately();
    const downAt = Date.now();
    await sleep(1500);
    await server.pgCtl('-w', 'start');
    const outageMs = Date.now() - downAt;

    const inv = await s.expectInvariants(40_000);
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
    const connectionLost = [c, ...workers].reduce((n, p) => n + linesMatching(p, /PostgreSQL connection lost/).length, 0);
    const retried = workers.reduce((n, p) => n + linesMatching(p, /transient error; retrying|shard failed; it will be retried/).length, 0);
    const rerun = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    await s.stopAll();
    report('5a PostgreSQL -m immediate stop + start', {
      timeouts: N,
      applied: inv.applied,
      shardsInFlightAtCrash: running,
      outageMs,
      connectionLostEvents: connectionLost,
      shardRetriesLogged: retried,
      shardsRerun: rerun,
      wallMs: s.elapsedMs(),
    });
  });

  it("pg_terminate_backend on a worker's backend inside its shard transaction: the shard retries on a new connection", async () => {
    s = await Scenario.create('fault-pg-terminate');
    // The first three shard transactions wait 700 ms before COMMIT: the window to terminate them.
    // (The executor retries a transaction on a new connection while the retry can still finish
    // inside the lease, 80% of leaseMs = 2.4 s here; a longer stall leaves it to lease expiry.)
    const worker = s.worker('worker', { failpoints: 'worker.before-commit=3*sleep(700)' });
    await worker.waitForMsg('worker started');
    const c = s.coordinator('coordinator');
    await s.seed(N);

    const terminated: number[] = [];
    await waitUntil(
      'a worker backend idle in its shard transaction',
      async () => {
        const { rows } = await s!.pool.query<{ pid: number; ok: boolean }>(
          `SELECT pid, pg_terminate_backend(pid) AS ok FROM pg_stat_activity
            WHERE datname = current_database() AND application_name ~ '^timeout-center(/[^ ]+)? worker$'
              AND state = 'idle in transaction' AND now() - state_change > interval '100 milliseconds'`,
        );
        terminated.push(...rows.filter((r) => r.ok).map((r) => r.pid));
        return terminated.length > 0;
      },
      20_000,
      50,
    );

    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    expect(worker.alive, `worker survived (stderr: ${worker.stderr.slice(-500)})`).toBe(true);
    expect(c.alive).toBe(true);
    const retries = linesMatching(worker, /shard transaction failed on a transient error; retrying/);
    expect(retries.length).toBeGreaterThanOrEqual(1);
    await s.stopAll();
    report('5b pg_terminate_backend inside the shard transaction', {
      timeouts: N,
      applied: inv.applied,
      backendsTerminated: terminated.length,
      transactionRetries: retries.length,
      wallMs: s.elapsedMs(),
    });
  });

  it('connection chaos: random coordinator and worker backends terminated every 150 ms for 3 s', async () => {
    s = await Scenario.create('fault-pg-chaos');
    const c = s.coordinator('coordinator');
    await c.waitForMsg('became leader', 15_000);
    const slow = 'worker.after-lease=sleep(100)';
    const workers = [s.worker('worker-1', { failpoints: slow }), s.worker('worker-2', { failpoints: slow })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    await s.seed(N, { spreadMs: 3000 });

    let terminated = 0;
    const until = Date.now() + 3000;
    while (Date.now() < until) {
      const { rows } = await s.pool.query<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
          WHERE datname = current_database() AND application_name LIKE 'timeout-center%' AND random() < 0.3`,
      );
      terminated += rows.filter((r) => r.ok).length;
      await sleep(150);
    }

    const inv = await s.expectInvariants(40_000);
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
    expect(terminated).toBeGreaterThanOrEqual(5);
    const tickFailures = linesMatching(c, /coordinator tick failed/).length;
    await s.stopAll();
    report('5c connection chaos', {
      timeouts: N,
      applied: inv.applied,
      backendsTerminated: terminated,
      coordinatorTickFailures: tickFailures,
      wallMs: s.elapsedMs(),
    });
  });

  it('every process connection to PostgreSQL goes silent (no close, no reply): the processes notice, reconnect and drain', async () => {
    // A silence bound above the kind's 2 s time limit, short for the test (the default is 30 s).
    s = await Scenario.create('fault-pg-silent', { databaseSilenceMs: 4000 });
    // The processes reach the database through a proxy that stops forwarding on the connections
    // open at that moment and keeps them open (a dropped firewall or NAT entry, a host gone
    // without a reset); the test's own pool goes direct.
    const via = await silentProxyTo(s.databaseUrl);
    proxy = via.proxy;
    const env = { DATABASE_URL: via.url };
    const c = s.coordinator('coordinator', { env });
    await c.waitForMsg('became leader', 15_000);
    const slow = 'worker.after-lease=sleep(200)';
    const workers = [s.worker('worker-1', { failpoints: slow, env }), s.worker('worker-2', { failpoints: slow, env })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    await s.seed(N, { spreadMs: 4000 });
    await waitUntil('a few shards done', async () => (await s!.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'done'`)) >= 3, 20_000);
    const silenced = proxy.silence();
    const at = Date.now();

    const inv = await s.expectInvariants(60_000);
    const drainedMs = Date.now() - at;
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
    // Each process found its silent connections and said so (db/silence-watch.ts), as a lost one.
    const noticed = [c, ...workers].map((p) => p.lines.filter((l) => JSON.stringify(l).includes('PostgreSQL sent nothing for 4000 ms')).length);
    expect(
      noticed.reduce((a, b) => a + b, 0),
      'silent connections named in the logs',
    ).toBeGreaterThan(0);
    await s.stopAll();
    report('5e PostgreSQL connections silent', {
      timeouts: N,
      applied: inv.applied,
      silencedConnections: silenced,
      drainedAfterSilenceMs: drainedMs,
      noticedByProcess: noticed,
      wallMs: s.elapsedMs(),
    });
  });
});
