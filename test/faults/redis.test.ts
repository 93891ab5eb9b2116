// Scenario 4: Redis, on a private redis-server, (a) SIGKILLed mid-run and restarted empty (no
// persistence: stream, consumer group, pending list and leadership lock are all gone), and
// (b) stalled with DEBUG SLEEP longer than the leadership lock lifetime. PostgreSQL holds the
// truth: the coordinator rebuilds the channel from it and every due timeout is applied once.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { startRedis, stopAllServers, type RedisServer } from '../helpers/servers.js';
import { startSilentProxy, type SilentProxy } from '../helpers/silent-proxy.js';
import { failoverLog } from './ha-burst.js';
import { KIND, linesMatching, report, Scenario, sleep, waitUntil } from './harness.js';
import { streamKey } from '../../src/transport/keys.js';

const N = 3000;
// Workers take 300 ms per shard, so shards wait in the stream and run when Redis goes away.
const SLOW = 'worker.after-lease=sleep(300)';
let redis: RedisServer;
let s: Scenario | undefined;
let proxy: SilentProxy | undefined;

beforeAll(async () => {
  redis = await startRedis();
});

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

describe('Redis faults', () => {
  it('Redis SIGKILLed and restarted empty mid-run: the channel is rebuilt from PostgreSQL', async () => {
    // A cap it never reaches keeps shards of 100 (the map sizes shards to the backlog only for
    // kinds without flow control): 30 shards, so some wait in the stream when Redis goes away.
    s = await Scenario.create('fault-redis-restart', { redisUrl: redis.url, kind: { maxRunningShards: 1000 } });
    const c = s.coordinator('coordinator', {});
    const first = await c.waitForMsg('became leader', 15_000);
    const workers = [s.worker('worker-1', { failpoints: SLOW }), s.worker('worker-2', { failpoints: SLOW })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    await s.seed(N);

    await waitUntil('a few shards done', async () => (await s!.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'done'`)) >= 4, 20_000);
    const inFlight = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state IN ('queued', 'running')`);
    const streamBefore = Number(await redis.cli('XLEN', streamKey(s.prefix, KIND)));
    const runId = async () => /run_id:(\w+)/.exec(await redis.cli('INFO', 'server'))?.[1];
    const before = await runId();
    const at = new Date();
    await redis.kill();
    await sleep(1000);
    // A new server with no persistence: empty (the processes reconnect within milliseconds, so
    // DBSIZE may already count their first keys).
    await redis.start();
    expect(await runId()).not.toBe(before);

    const inv = await s.expectInvariants(40_000);
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived`).toBe(true);
    // One outage, one pair per process, each naming the node (issue 31, point 3).
    const logs = failoverLog({ s }, at, new Date());
    for (const l of logs) {
      console.log(`[failover-log] single ${JSON.stringify(l)}`);
      expect(l.errors, `${l.process}: no error line`).toBe(0);
      expect(l.unnamed, `${l.process}: every reachability line names its node`).toEqual([]);
      const unreachable = Object.entries(l.byMessage)
        .filter(([m]) => m.startsWith('Redis unreachable'))
        .reduce((a, [, n]) => a + n, 0);
      expect(unreachable, `${l.process}: one Redis unreachable line`).toBe(1);
      expect(l.byMessage['Redis reachable again'], `${l.process}: one Redis reachable again line`).toBe(1);
    }
    // The coordinator lost its lock with the data and was elected again under a new epoch; it saw
    // the channel marker gone and republished what was queued.
    const elections = c.lines.filter((l) => l.msg === 'became leader').map((l) => Number(l['epoch']));
    expect(elections.length).toBeGreaterThanOrEqual(2);
    expect(Math.max(...elections)).toBeGreaterThan(Number(first['epoch']));
    const channelLost = linesMatching(c, /reaper recovered shards/).filter((l) => l['channelLost'] === true);
    const republished = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE publish_count > 1`);
    expect(republished).toBeGreaterThanOrEqual(1);
    const stepDowns = linesMatching(c, /stepped down as leader/).map((l) => String(l['reason']));
    const lostAcks = workers.reduce((n, w) => n + linesMatching(w, /shard committed, but its ACK failed/).length, 0);
    // The only coordinator is never fenced off its own new term by a tick left from the old one.
    expect(stepDowns).not.toContain('fenced by a newer epoch');
    await s.stopAll();
    report('4a Redis SIGKILL + empty restart', {
      timeouts: N,
      applied: inv.applied,
      shardsInFlightAtKill: inFlight,
      streamEntriesLost: streamBefore,
      republishedShards: republished,
      channelLostRecoveries: channelLost.length,
      epochs: elections,
      stepDowns,
      committedButAckLost: lostAcks,
      wallMs: s.elapsedMs(),
    });
  });

  it('Redis stalled (DEBUG SLEEP) past the lock lifetime: leadership moves or resumes under a new epoch, nothing lost or doubled', async () => {
    s = await Scenario.create('fault-redis-stall', { redisUrl: redis.url });
    const a = s.coordinator('coordinator-a');
    const first = await a.waitForMsg('became leader', 15_000);
    const b = s.coordinator('coordinator-b');
    const workers = [s.worker('worker-1', { failpoints: SLOW }), s.worker('worker-2', { failpoints: SLOW })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    // Due over 8 s, so that timeouts keep coming due through the stall (a flood due at once is
    // drained in a few large shards before it).
    await s.seed(N, { spreadMs: 8000 });

    await waitUntil('a few shards done', async () => (await s!.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'done'`)) >= 4, 20_000);
    const stallMs = 4000;
    const t0 = Date.now();
    await redis.cli('DEBUG', 'SLEEP', String(stallMs / 1000));
    const stalledMs = Date.now() - t0;
    expect(stalledMs).toBeGreaterThanOrEqual(stallMs - 100);

    const inv = await s.expectInvariants(40_000);
    expect(inv.applied).toBe(N);
    for (const p of [a, b, ...workers]) expect(p.alive, `${p.name} survived`).toBe(true);
    const elected = () => [a, b].flatMap((p) => p.lines.filter((l) => l.msg === 'became leader').map((l) => Number(l['epoch'])));
    await waitUntil('an election after the stall', async () => Math.max(...elected()) > Number(first['epoch']), 20_000);
    const epochs = [a, b].flatMap((p) => p.lines.filter((l) => l.msg === 'became leader').map((l) => ({ who: p.name, epoch: Number(l['epoch']) })));
    // The lock outlived by the stall: someone was elected again with a higher epoch.
    expect(Math.max(...epochs.map((e) => e.epoch))).toBeGreaterThan(Number(first['epoch']));
    const stepDowns = [a, b].flatMap((p) => linesMatching(p, /stepped down as leader/).map((l) => `${p.name}: ${String(l['reason'])}`));
    const fenced = [a, b].flatMap((p) => linesMatching(p, /^fenced:/));
    await s.stopAll();
    report('4b Redis DEBUG SLEEP past lock TTL', {
      timeouts: N,
      applied: inv.applied,
      stalledMs,
      elections: epochs,
      stepDowns,
      fencedWrites: fenced.length,
      wallMs: s.elapsedMs(),
    });
  });

  it('every Redis connection goes silent (no close, no reply): the processes notice, reconnect and drain', async () => {
    // Through a proxy that stops forwarding on the connections open at that moment and keeps them
    // open: what a dropped firewall or NAT entry, or a host gone without a reset, leaves a client.
    proxy = await startSilentProxy(redis.port);
    s = await Scenario.create('fault-redis-silent', { redisUrl: `redis://127.0.0.1:${proxy.port}` });
    const c = s.coordinator('coordinator');
    const first = await c.waitForMsg('became leader', 15_000);
    const workers = [s.worker('worker-1', { failpoints: SLOW }), s.worker('worker-2', { failpoints: SLOW })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    await s.seed(N, { spreadMs: 6000 });
    await waitUntil('a few shards done', async () => (await s!.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'done'`)) >= 4, 20_000);
    const silenced = proxy.silence();
    expect(silenced).toBeGreaterThanOrEqual(3);
    const at = Date.now();

    const inv = await s.expectInvariants(40_000);
    const drainedMs = Date.now() - at;
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived`).toBe(true);
    const epochs = c.lines.filter((l) => l.msg === 'became leader').map((l) => Number(l['epoch']));
    const stepDowns = linesMatching(c, /stepped down as leader/).map((l) => String(l['reason']));
    await s.stopAll();
    report('4c Redis connections silent', {
      timeouts: N,
      applied: inv.applied,
      silencedConnections: silenced,
      drainedAfterSilenceMs: drainedMs,
      firstEpoch: Number(first['epoch']),
      epochs,
      stepDowns,
      wallMs: s.elapsedMs(),
    });
  });
});
