// Issue 26 on a real Redis Cluster (3 masters + 3 replicas, private, free ports): the channel's
// keys spread over the masters and no command crosses slots; under a 50,000-timeout burst over
// three kinds (two coordinators, two workers), (a) the master holding a kind's stream is SIGKILLed
// mid-drain and its replica promoted, (c) the whole cluster is stopped and created again empty.
// Both end with the invariants and report the longest gap in closes around the fault.
import { Cluster } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CLI, killAll } from '../helpers/processes.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-ha.js';
import { stopAllServers } from '../helpers/servers.js';
import { requireTools } from '../helpers/system-tools.js';
import { leaderLockKey, markerKey, streamKey } from '../../src/transport/keys.js';
import { failoverLog, KINDS, MAX_FAILOVER_LINES, MAX_FAILOVER_REPEATS, midDrain, startBurst, type Burst } from './ha-burst.js';
import { sleep, waitUntil } from './harness.js';

const run = promisify(execFile);
const tools = requireTools('redis-cluster');
let cluster: RedisCluster;
let burst: Burst | undefined;

beforeAll(async () => {
  if (!tools.skip) cluster = await startRedisCluster();
}, 60_000);

afterEach(async () => {
  await killAll();
  await burst?.s.close();
  burst = undefined;
});

afterAll(async () => {
  await killAll();
  await stopAllServers();
});

describe.skipIf(tools.skip)(tools.title('Redis Cluster'), () => {
  it('slot spread: the keys of a kind share one slot, the example config kinds land on different masters', async () => {
    // config.example.yaml declares order.unpaid and order.unconfirmed; the burst adds order.unshipped.
    const keys = KINDS.flatMap((k) => [streamKey('tc', k), markerKey('tc', k)]);
    const owners = await cluster.slotOwners([...keys, leaderLockKey('tc')]);
    for (const o of owners) console.log(`[slot-spread] ${o.key} -> slot ${o.slot} -> master 127.0.0.1:${o.master}`);
    const byKey = new Map(owners.map((o) => [o.key, o]));
    for (const k of KINDS) expect(byKey.get(markerKey('tc', k))!.slot).toBe(byKey.get(streamKey('tc', k))!.slot);
    const master = (k: string) => byKey.get(streamKey('tc', k))!.master;
    expect(master('order.unpaid')).not.toBe(master('order.unconfirmed'));
  });

  it('a cluster client refuses nothing: publish, read, ack and the lock on one cluster connection', async () => {
    // A direct check that no command crosses slots (a cluster answers CROSSSLOT otherwise).
    const { RedisStreamsChannel } = await import('../../src/transport/redis-streams.js');
    const { redlockLeaderLock } = await import('../../src/coordinator/leader-lock.js');
    const { createLogger } = await import('../../src/observability/logger.js');
    const nodes = cluster.seeds.split(',').map((s) => ({ host: '127.0.0.1', port: Number(s.split(':')[1]) }));
    const channel = new RedisStreamsChannel({
      connection: { mode: 'cluster', nodes, tls: false },
      keyPrefix: `t${Date.now()}`,
      logger: createLogger('silent'),
    });
    try {
      await channel.init([...KINDS]);
      await channel.publish(KINDS.map((kind, i) => ({ kind, shardId: i + 1, scanId: 1 })));
      const got = [];
      const until = Date.now() + 5000;
      while (got.length < KINDS.length && Date.now() < until) got.push(...(await channel.receive('c1', [...KINDS], 10, 200)));
      expect(got.map((d) => d.message.kind).sort()).toEqual([...KINDS].sort());
      await channel.ack(got);
      expect(await channel.depth()).toEqual({ waiting: 0, pending: 0 });
      expect(await channel.checkLostAndMark()).toBe(true);
      expect(await channel.checkLostAndMark()).toBe(false);
      const lock = await redlockLeaderLock(channel.redis).acquire(leaderLockKey('t'), 2000);
      await lock.release();
      expect(channel.describe()).toMatchObject({ mode: 'cluster' });
      expect(channel.describe().commands).toHaveLength(3);
      expect(channel.redis).toBeInstanceOf(Cluster);
    } finally {
      await channel.close();
    }
  });

  it('(a) the master holding a stream is SIGKILLed mid-drain: its replica is promoted and the drain goes on', async () => {
    burst = await startBurst('fault-cluster-master', { REDIS_CLUSTER: cluster.seeds });
    const b = burst;
    const kind = KINDS[1];
    const victimPort = await cluster.masterOf(b.streams[kind]!);
    const victim = cluster.nodes.find((n) => n.port === victimPort)!;
    const closedAtFault = await midDrain(b);
    const at = await b.dbNow();
    await victim.kill();
    // The promoted replica answers as the slot's master.
    let promoted = -1;
    await waitUntil(
      'a replica promoted for the stream slot',
      async () => {
        promoted = await cluster.masterOf(b.streams[kind]!).catch(() => -1);
        return promoted !== -1 && promoted !== victimPort;
      },
      30_000,
      20,
    );
    const answeringAt = await b.dbNow();
    // What the processes logged about the failover, once the drain is over (issue 31, point 3).
    await b.s.expectInvariants(60_000);
    await sleep(2500); // a slots refresh (every 2 s) after the last close
    const logs = failoverLog(b, at, new Date());
    for (const l of logs) console.log(`[failover-log] cluster ${JSON.stringify(l)}`);
    const figures = await b.finish('26a cluster master SIGKILL mid-drain', {
      at,
      answeringAt,
      kind,
      extra: { closedAtFault, victimPort, promoted, logLines: Object.fromEntries(logs.map((l) => [l.process, l.lines])) },
    });
    // status names the mode and the node now serving each kind: the promoted replica for this one.
    // Exit 1 when it names a problem (a lag left from the failover): the document is printed either way.
    const { stdout } = await run(process.execPath, [CLI, 'status', '--json', '--config', b.s.configPath], {
      env: { ...process.env, ...b.s.env() } as NodeJS.ProcessEnv,
    }).catch((err: { code?: number; stdout: string }) => {
      expect(err.code).toBe(1);
      return err;
    });
    const status = JSON.parse(stdout) as { redis: { mode: string; streams: { kind: string; node: string }[] } };
    expect(status.redis.mode).toBe('cluster');
    expect(status.redis.streams.find((x) => x.kind === kind)?.node).toBe(`127.0.0.1:${promoted}`);
    // The old master comes back as a replica of the promoted one, for the next test.
    await victim.start();
    await waitUntil('the old master rejoined', async () => (await cluster.masterOf(b.streams[kind]!)) === promoted, 30_000);
    expect(figures['applied']).toBeGreaterThan(0);
    // A failover reads like one: a handful of lines per process, none at error level, each line
    // about Redis naming its node; the killed master is named as it leaves.
    for (const l of logs) {
      expect(l.errors, `${l.process}: no error line for an expected failover`).toBe(0);
      expect(l.lines, `${l.process}: at most a handful of lines (${JSON.stringify(l.byMessage)})`).toBeLessThanOrEqual(MAX_FAILOVER_LINES);
      expect(Math.max(0, ...Object.values(l.byMessage)), `${l.process}: no line repeated (${JSON.stringify(l.byMessage)})`).toBeLessThanOrEqual(
        MAX_FAILOVER_REPEATS,
      );
      expect(l.unnamed, `${l.process}: every Redis line names its node`).toEqual([]);
    }
    const left = b.s.procs.flatMap((p) => p.lines.filter((x) => /^Redis unreachable/.test(String(x.msg))).map((x) => x['node']));
    expect(left, 'the killed master is named').toContain(`127.0.0.1:${victimPort}`);
  });

  it('(c) the whole cluster is stopped and created again empty: PostgreSQL rebuilds what was in flight', async () => {
    burst = await startBurst('fault-cluster-restart', { REDIS_CLUSTER: cluster.seeds });
    const b = burst;
    const closedAtFault = await midDrain(b);
    const at = await b.dbNow();
    await cluster.killAll();
    await sleep(500);
    await cluster.restartEmpty();
    const answeringAt = await b.dbNow();
    const coordinators = b.s.procs.filter((p) => p.name.startsWith('coordinator'));
    const figures = await b.finish('26c cluster stopped and created again empty', { at, answeringAt, extra: { closedAtFault } });
    // The leader noticed the markers gone and rebuilt the channel from PostgreSQL; how many shards
    // it had to republish depends on what was queued at that moment (reported, not asserted).
    const noticed = coordinators.flatMap((c) =>
      c.lines.filter((l) => /^shard channel marker missing/.test(String(l.msg)) && Date.parse(String(l.time)) >= at.getTime()),
    );
    expect(noticed.length, 'the leader saw the markers gone and rebuilt the channel from PostgreSQL').toBeGreaterThanOrEqual(1);
    expect(figures['applied']).toBe(50_000);
  });
});
