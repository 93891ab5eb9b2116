// A Redis outage seen by the leader's dispatch: shards that Redis refuses wait in memory and go out
// with the next flush, and the outage is one warn line, not one per tick while it lasts (a soak
// under Cluster failovers once logged "could not publish shards to Redis" 24 times).
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dispatcher } from '../../src/coordinator/dispatch.js';
import { LeaderFlow } from '../../src/flow/leader-flow.js';
import { Metrics } from '../../src/observability/metrics.js';
import { RedisStreamsChannel } from '../../src/transport/redis-streams.js';
import { startRedis, stopAllServers, type RedisServer } from '../helpers/servers.js';

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterAll(async () => {
  await stopAllServers();
});

describe('dispatch while Redis is down', () => {
  it('warns once per outage, keeps the refused shards and publishes them when Redis is back', async () => {
    const lines: { level: number; msg: string; shards?: number }[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l));
        done();
      },
    });
    const logger = pino({ level: 'debug' }, sink);
    const channel = new RedisStreamsChannel({
      connection: { mode: 'single', url: redis.url },
      keyPrefix: `dispatch${Date.now()}`,
      logger: pino({ level: 'silent' }),
    });
    const metrics = new Metrics('coordinator');
    const dispatcher = new Dispatcher(channel, new LeaderFlow(metrics), metrics, logger);
    try {
      await channel.init(['order.unpaid']);
      await redis.kill();
      for (let i = 1; i <= 5; i += 1) {
        dispatcher.add([{ shardId: i, scanId: 1, kind: 'order.unpaid' }]);
        await dispatcher.flush();
      }
      expect(dispatcher.waiting, 'every refused shard waits for the next flush').toBe(5);
      const refused = lines.filter((l) => l.msg.startsWith('could not publish shards to Redis'));
      expect(refused.map((l) => [l.level, l.msg])).toEqual([
        [40, 'could not publish shards to Redis; will retry'],
        ...Array.from({ length: 4 }, () => [20, 'could not publish shards to Redis again']),
      ]);

      await redis.start();
      await channel.init(['order.unpaid']);
      await dispatcher.flush();
      expect(dispatcher.waiting).toBe(0);
      expect(await channel.depth()).toEqual({ waiting: 5, pending: 0 });

      // A second outage warns again: the count starts over once Redis took a publish.
      await redis.kill();
      dispatcher.add([{ shardId: 6, scanId: 2, kind: 'order.unpaid' }]);
      await dispatcher.flush();
      expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual([
        'could not publish shards to Redis; will retry',
        'could not publish shards to Redis; will retry',
      ]);
    } finally {
      await channel.close();
    }
  }, 60_000);
});
