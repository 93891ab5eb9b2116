// Builds the ioredis client for each Redis mode (one node, Cluster, Sentinel) and says which nodes
// a client reaches. One place for the options that decide how fast a failover is noticed:
// reconnects are retried every 50-500 ms (a promoted replica is used within half a second of
// answering), and a blocking read never resends itself after a reconnect (redis-streams.ts).
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import type { RedisConnectionConfig } from '../config.js';
import { isClosedByOwner, outagesOf, RedisOutages } from './redis-outages.js';

export type RedisClient = Redis | Cluster;

/** commands: short requests that fail after a few reconnect attempts (their callers retry, and
 *  PostgreSQL holds the truth). blocking: XREADGROUP BLOCK, on a connection of its own with no
 *  per-request retry limit and no resend of unfinished commands (ioredis' advice). */
export type ConnectionRole = 'commands' | 'blocking';

const reconnectDelay = (times: number): number => Math.min(50 * times, 500);

/** A commands connection with a request out and nothing heard for this long is presumed dead,
 *  destroyed and reconnected. Redis answers in milliseconds; a connection that went silent
 *  without closing (a dropped firewall or NAT entry, a host gone without a reset) would otherwise
 *  hold its commands until TCP keep-alive gives up, minutes later, and with them the leader's
 *  lock renewal and tick. The blocking reads bound themselves (stream-reader.ts). */
export const COMMAND_SILENCE_MS = 5000;

/** A sentinel asked for the primary's address answers in milliseconds; one that accepted the
 *  connection and never answers would otherwise hold a reconnect forever: the next is asked. */
const SENTINEL_ANSWER_MS = 1000;

function baseOptions(role: ConnectionRole): RedisOptions {
  return {
    connectTimeout: 2000,
    keepAlive: 5000,
    maxRetriesPerRequest: role === 'blocking' ? null : 3,
    ...(role === 'commands' ? { socketTimeout: COMMAND_SILENCE_MS } : {}),
    autoResendUnfulfilledCommands: role !== 'blocking',
    // A primary demoted by a failover answers READONLY: reconnect (Sentinel then finds the new one).
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
  };
}

export function createRedisClient(target: RedisConnectionConfig, logger: Logger, role: ConnectionRole): RedisClient {
  const base = baseOptions(role);
  let client: RedisClient;
  if (target.mode === 'single') {
    client = new Redis(target.url, { ...base, retryStrategy: reconnectDelay });
  } else if (target.mode === 'sentinel') {
    client = new Redis({
      ...base,
      sentinels: target.sentinels,
      name: target.name,
      role: 'master',
      username: target.username,
      password: target.password,
      sentinelUsername: target.sentinelUsername,
      sentinelPassword: target.sentinelPassword,
      ...(target.tls ? { tls: {}, enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
      retryStrategy: reconnectDelay,
      sentinelRetryStrategy: reconnectDelay,
      sentinelCommandTimeout: SENTINEL_ANSWER_MS,
      // Subscribes to +switch-master on the sentinels and reconnects at once, also when the old
      // primary is still up (a manual failover) rather than waiting for it to refuse a write.
      failoverDetector: true,
    });
    connectAgainWhenEnded(client);
  } else {
    const options: ClusterOptions = {
      redisOptions: { ...base, username: target.username, password: target.password, ...(target.tls ? { tls: {} } : {}) },
      clusterRetryStrategy: reconnectDelay,
      // A command to a master that died is retried after a slot refresh (every 100 ms, up to
      // maxRedirections times), so it reaches the promoted replica without the caller's help.
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      maxRedirections: 16,
      scaleReads: 'master',
      slotsRefreshTimeout: 1000,
      // Learns a topology change (a failover elsewhere) even without a MOVED reply.
      slotsRefreshInterval: 2000,
    };
    client = new Cluster(target.nodes, options);
  }
  watch(client, target, logger);
  return client;
}

/**
 * ioredis ends a Sentinel client for good (status end, no retry, every command refused with
 * "Connection is closed.") when a failover is announced (+switch-master, the failover detector)
 * while the client, reconnecting, is asking a sentinel for the primary: SentinelConnector's
 * connect() finds its connecting flag cleared and throws. In CI that left every process of a
 * failover test cut off from the promoted primary for a minute (test/faults/redis-sentinel.test.ts
 * (a)). Such a client is connected again, the same object (the leader lock and the channel keep
 * it), unless its owner closed it.
 */
function connectAgainWhenEnded(client: Redis): void {
  client.on('end', () => {
    if (isClosedByOwner(client)) return;
    setTimeout(() => {
      if (client.status === 'end' && !isClosedByOwner(client)) client.connect().catch(() => {});
    }, reconnectDelay(1)).unref();
  });
}

/** Logs what an operator needs during a failover, once per process for all its connections to
 *  the target (redis-outages.ts), without a line per reconnect attempt or per slot refresh. */
function watch(client: RedisClient, target: RedisConnectionConfig, logger: Logger): void {
  const where = describeTarget(target);
  const outages = outagesOf(where, () => new RedisOutages(logger.child({ redis: target.mode }), where, configuredNodes(target), reachedNodes));
  outages.watch(client);
}

/** host:port of the node(s) the configuration names (for Sentinel: the sentinels). */
function configuredNodes(target: RedisConnectionConfig): string[] {
  if (target.mode === 'cluster') return target.nodes.map((n) => `${n.host}:${n.port}`);
  if (target.mode === 'sentinel') return target.sentinels.map((n) => `${n.host}:${n.port}`);
  try {
    const url = new URL(target.url);
    return [`${url.hostname}:${url.port || '6379'}`];
  } catch {
    return [];
  }
}

/** The target as operators know it, password hidden. */
export function describeTarget(target: RedisConnectionConfig): string {
  const nodes = (list: { host: string; port: number }[]) => list.map((n) => `${n.host}:${n.port}`).join(',');
  if (target.mode === 'single') return redactUrl(target.url);
  if (target.mode === 'cluster') return `cluster ${nodes(target.nodes)}`;
  return `sentinel primary "${target.name}" via ${nodes(target.sentinels)}`;
}

export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):([^@/]*)@/, '//$1:***@');
}

/** The node(s) a client talks to now: the connected address of a single-node or Sentinel client
 *  (after a failover, the promoted replica), the masters a Cluster client knows. */
export function reachedNodes(client: RedisClient): string[] {
  if (client instanceof Cluster) return client.nodes('master').map((n) => `${n.options.host}:${n.options.port}`);
  const s = client.status === 'ready' ? client.stream : undefined;
  if (s?.remoteAddress) return [`${s.remoteAddress}:${s.remotePort}`];
  return [`(${client.status})`];
}
