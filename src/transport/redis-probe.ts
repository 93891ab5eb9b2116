// What `timeout-center status` says about Redis: which mode the config selects and, asked of a
// fresh connection, which node serves each kind's stream (on a cluster, the master of its slot).
import { Cluster } from 'ioredis';
import type { Logger } from 'pino';
import type { RedisConnectionConfig } from '../config.js';
import { streamKey } from './keys.js';
import { createRedisClient, describeTarget, reachedNodes } from './redis-connection.js';
import { forgetConnection } from './redis-outages.js';
import { within } from '../bounded.js';

export interface RedisProbe {
  mode: RedisConnectionConfig['mode'];
  target: string;
  /** Node(s) the connection reached: the node, the Sentinel primary, or the cluster's masters. */
  nodes: string[];
  /** Where each kind's stream lives (slot: on a cluster only). */
  streams: { kind: string; key: string; node: string; slot?: number }[];
  error?: string;
}

export async function probeRedis(
  target: RedisConnectionConfig,
  prefix: string,
  kinds: readonly string[],
  logger: Logger,
  timeoutMs = 3000,
): Promise<RedisProbe> {
  const client = createRedisClient(target, logger, 'commands');
  const base = { mode: target.mode, target: describeTarget(target) };
  try {
    const answer = (async (): Promise<RedisProbe> => {
      await client.ping();
      const nodes = reachedNodes(client);
      const streams = await Promise.all(
        kinds.map(async (kind) => {
          const key = streamKey(prefix, kind);
          if (!(client instanceof Cluster)) return { kind, key, node: nodes[0] ?? '?' };
          const slot = Number(await client.call('CLUSTER', 'KEYSLOT', key));
          const master = client.slots[slot]?.[0] ?? '?';
          return { kind, key, node: master, slot };
        }),
      );
      return { ...base, nodes, streams };
    })();
    return await within(answer, timeoutMs, `no answer within ${timeoutMs} ms`);
  } catch (err) {
    return { ...base, nodes: [], streams: [], error: (err as Error).message };
  } finally {
    forgetConnection(client);
    client.disconnect();
  }
}
