// Shard channel on Redis Streams: one stream per kind (`<prefix>:shards:<kind>`), each with the
// consumer group `workers`, so a worker reads (and reclaims) only the kinds it serves. Entries are
// deleted once acknowledged, so a stream holds only what is in flight. Redis may lose everything: the coordinator notices
// the missing marker key and republishes from PostgreSQL.
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import type { ShardChannel, ShardDelivery, ShardMessage } from './channel.js';

const GROUP = 'workers';
/** A blocking read that has not answered this long after its BLOCK time is presumed lost. */
const BLOCKING_MARGIN_MS = 5000;

export interface RedisStreamsOptions {
  url: string;
  keyPrefix: string;
  logger: Logger;
}

type RawEntry = [id: string, fields: string[] | null];

export function redisConnection(url: string, logger: Logger, extra: RedisOptions = {}): Redis {
  const redis = new Redis(url, {
    lazyConnect: false,
    // Fail a command after a few reconnect attempts instead of queueing forever: the caller's
    // loop retries, and PostgreSQL still holds the truth.
    maxRetriesPerRequest: 3,
    retryStrategy: (times) => Math.min(100 * times, 2000),
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
    ...extra,
  });
  let lastLog = 0;
  redis.on('error', (err: Error) => {
    // ioredis emits an error per failed reconnect; log at most one per 5 s.
    const now = Date.now();
    if (now - lastLog > 5000) {
      lastLog = now;
      logger.warn({ err: { message: err.message } }, `Redis unreachable at ${redactUrl(url)}; retrying`);
    }
  });
  return redis;
}

export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):([^@/]*)@/, '//$1:***@');
}

export class RedisStreamsChannel implements ShardChannel {
  readonly markerKey: string;
  /** Kinds this process has initialised or published: what depth() sums and a lost Redis
   *  re-creates. */
  private readonly known = new Set<string>();
  private readonly commands: Redis;
  private blocking: Redis | undefined;
  /** Consumers that already read back their own unacknowledged entries since start. */
  private readonly drainedOwnPending = new Set<string>();

  constructor(private readonly options: RedisStreamsOptions) {
    this.markerKey = `${options.keyPrefix}:channel-marker`;
    this.commands = redisConnection(options.url, options.logger);
  }

  /** The connection for other users of the same Redis (the leadership lock). */
  get redis(): Redis {
    return this.commands;
  }

  /** The stream of a kind. */
  streamKey(kind: string): string {
    return `${this.options.keyPrefix}:shards:${kind}`;
  }

  async init(kinds: readonly string[]): Promise<void> {
    for (const kind of kinds) {
      this.known.add(kind);
      try {
        await this.commands.call('XGROUP', 'CREATE', this.streamKey(kind), GROUP, '0', 'MKSTREAM');
      } catch (err) {
        if (!String((err as Error).message).includes('BUSYGROUP')) throw err;
      }
    }
  }

  async publish(messages: readonly ShardMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const fresh = [...new Set(messages.map((m) => m.kind))].filter((k) => !this.known.has(k));
    if (fresh.length > 0) await this.init(fresh);
    const pipeline = this.commands.pipeline();
    for (const m of messages) {
      pipeline.call('XADD', this.streamKey(m.kind), '*', 'shard', String(m.shardId), 'scan', String(m.scanId), 'kind', m.kind);
    }
    const results = (await pipeline.exec()) ?? [];
    const failed = results.find(([err]) => err);
    if (failed?.[0]) throw failed[0];
  }

  private blockingConnection(): Redis {
    // Blocking reads get their own connection with no per-request retry limit (ioredis advice).
    this.blocking ??= redisConnection(this.options.url, this.options.logger, {
      maxRetriesPerRequest: null,
      autoResendUnfulfilledCommands: false,
    });
    return this.blocking;
  }

  async receive(consumer: string, kinds: readonly string[], count: number, blockMs: number): Promise<ShardDelivery[]> {
    if (kinds.length === 0) return [];
    const own = !this.drainedOwnPending.has(consumer);
    const keys = kinds.map((k) => this.streamKey(k));
    const args = own
      ? ['GROUP', GROUP, consumer, 'COUNT', '1000', 'STREAMS', ...keys, ...keys.map(() => '0')]
      : ['GROUP', GROUP, consumer, 'COUNT', String(count), 'BLOCK', String(blockMs), 'STREAMS', ...keys, ...keys.map(() => '>')];
    let reply: unknown;
    try {
      reply = await this.callBlocking(args, own ? BLOCKING_MARGIN_MS : blockMs + BLOCKING_MARGIN_MS);
    } catch (err) {
      if (String((err as Error).message).includes('NOGROUP')) {
        // Redis lost the stream (restart without persistence): recreate and read again.
        await this.init(kinds);
        return [];
      }
      throw err;
    }
    const entries = parseReadReply(reply, (key) => kinds[keys.indexOf(key)]);
    // Own pending entries are read once, at start; later reads of '0' would repeat them.
    if (own) this.drainedOwnPending.add(consumer);
    return this.toDeliveries(entries, own);
  }

  /**
   * XREADGROUP on the blocking connection, bounded. That connection does not resend unfinished
   * commands after a reconnect (a resent read could deliver entries nobody waits for), and ioredis
   * then drops the command without settling its promise: a read in flight when the connection
   * broke would wait forever, and the worker with it (no more shards, no stop). Past the bound the
   * connection is thrown away and the caller's loop retries on a fresh one.
   */
  private async callBlocking(args: string[], boundMs: number): Promise<unknown> {
    const conn = this.blockingConnection();
    const call = conn.call('XREADGROUP', ...args);
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        if (this.blocking === conn) this.blocking = undefined;
        conn.disconnect();
        reject(new Error(`XREADGROUP got no answer within ${boundMs} ms (Redis connection lost?); reading again on a new connection`));
      }, boundMs);
    });
    call.catch(() => {}); // settles (or not) after the bound: nobody waits for it any more
    try {
      return await Promise.race([call, bound]);
    } finally {
      clearTimeout(timer);
    }
  }

  async reclaim(consumer: string, kinds: readonly string[], minIdleMs: number, count: number): Promise<ShardDelivery[]> {
    const out: ShardDelivery[] = [];
    for (const kind of kinds) {
      if (out.length >= count) break;
      let reply: unknown;
      try {
        reply = await this.commands.call('XAUTOCLAIM', this.streamKey(kind), GROUP, consumer, String(minIdleMs), '0-0', 'COUNT', String(count - out.length));
      } catch (err) {
        if (String((err as Error).message).includes('NOGROUP')) continue;
        throw err;
      }
      const entries = Array.isArray(reply) && Array.isArray(reply[1]) ? (reply[1] as RawEntry[]) : [];
      out.push(
        ...(await this.toDeliveries(
          entries.map((e) => [kind, e] as const),
          true,
        )),
      );
    }
    return out;
  }

  /** Entries with the kind of the stream they came from. */
  private async toDeliveries(entries: (readonly [kind: string, entry: RawEntry])[], reclaimed: boolean): Promise<ShardDelivery[]> {
    const deliveries: ShardDelivery[] = [];
    const junk: ShardDelivery[] = [];
    for (const [kind, [id, fields]] of entries) {
      const message = fields ? parseFields(fields) : undefined;
      if (message && message.kind === kind) deliveries.push({ deliveryId: id, message, reclaimed });
      // A deleted or malformed entry: acknowledge it so it leaves the pending list.
      else junk.push({ deliveryId: id, message: { shardId: 0, scanId: 0, kind }, reclaimed });
    }
    if (junk.length > 0) await this.ack(junk);
    return deliveries;
  }

  async ack(deliveries: readonly ShardDelivery[]): Promise<void> {
    if (deliveries.length === 0) return;
    const byKind = new Map<string, string[]>();
    for (const d of deliveries) byKind.set(d.message.kind, [...(byKind.get(d.message.kind) ?? []), d.deliveryId]);
    const tx = this.commands.multi();
    for (const [kind, ids] of byKind) tx.call('XACK', this.streamKey(kind), GROUP, ...ids).call('XDEL', this.streamKey(kind), ...ids);
    await tx.exec();
  }

  async checkLostAndMark(): Promise<boolean> {
    // SET NX answers OK only when the marker was missing: first start, or Redis lost its data.
    const created = await this.commands.set(this.markerKey, String(Date.now()), 'NX');
    if (created === 'OK') {
      await this.init([...this.known]);
      return true;
    }
    return false;
  }

  async removeConsumer(consumer: string, kinds: readonly string[]): Promise<void> {
    // Only when it holds nothing: a consumer's unacknowledged entries would otherwise vanish
    // from the pending list (the reaper would still recover them from PostgreSQL, later).
    for (const kind of kinds) {
      const key = this.streamKey(kind);
      const pending = (await this.commands.call('XPENDING', key, GROUP, '-', '+', '1', consumer).catch(() => [])) as unknown[];
      if (pending.length === 0) await this.commands.call('XGROUP', 'DELCONSUMER', key, GROUP, consumer).catch(() => {});
    }
  }

  async depth(): Promise<{ waiting: number; pending: number }> {
    let waiting = 0;
    let pending = 0;
    for (const kind of this.known) {
      const key = this.streamKey(kind);
      const [len, summary] = await Promise.all([
        this.commands.call('XLEN', key) as Promise<number>,
        this.commands.call('XPENDING', key, GROUP).catch(() => [0]) as Promise<unknown[]>,
      ]);
      const p = Number(summary?.[0] ?? 0);
      pending += p;
      waiting += Math.max(0, Number(len) - p);
    }
    return { waiting, pending };
  }

  async close(): Promise<void> {
    const conns = [this.commands, this.blocking].filter((c): c is Redis => c !== undefined);
    await Promise.all(conns.map((c) => c.quit().catch(() => c.disconnect())));
  }
}

/** XREADGROUP's reply is [[key, entries], ...] over RESP2, and a flat [key, entries, ...] when
 *  ioredis 6 hands back RESP3's map; accept both. Each entry comes with its stream's kind. */
function parseReadReply(reply: unknown, kindOf: (key: string) => string | undefined): (readonly [string, RawEntry])[] {
  if (!Array.isArray(reply)) return [];
  const out: (readonly [string, RawEntry])[] = [];
  const add = (key: unknown, entries: unknown) => {
    const kind = kindOf(String(key));
    if (kind !== undefined && Array.isArray(entries)) for (const e of entries as RawEntry[]) out.push([kind, e]);
  };
  if (typeof reply[0] === 'string' || Buffer.isBuffer(reply[0])) {
    for (let i = 0; i + 1 < reply.length; i += 2) add(reply[i], reply[i + 1]);
    return out;
  }
  for (const stream of reply as [string, RawEntry[]][]) add(stream?.[0], stream?.[1]);
  return out;
}

function parseFields(fields: string[]): ShardMessage | undefined {
  const map = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) map.set(String(fields[i]), String(fields[i + 1]));
  const shardId = Number(map.get('shard'));
  const scanId = Number(map.get('scan'));
  const kind = map.get('kind');
  if (!Number.isSafeInteger(shardId) || shardId <= 0 || !Number.isSafeInteger(scanId) || !kind) return undefined;
  return { shardId, scanId, kind };
}
