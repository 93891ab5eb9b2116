// Shard channel on Redis Streams: one stream per kind (keys.ts: `<prefix>:{<kind>}:shards`), each
// with the consumer group `workers`, so a worker reads (and reclaims) only the kinds it serves.
// Entries are deleted once acknowledged, so a stream holds only what is in flight. Redis may lose
// everything: the coordinator notices a missing marker key and republishes from PostgreSQL.
//
// One node, Sentinel or Cluster (redis-connection.ts). Every command and pipeline touches the keys
// of one kind only (one hash slot), so the same code runs on a cluster. Reads go through one
// StreamReader per read group: on one node (or Sentinel) all kinds in one XREADGROUP, as before;
// on a cluster one blocking XREADGROUP per kind, each on its own connection, since a cluster
// refuses a read across slots and a blocked connection would hold up the others.
import { Cluster } from 'ioredis';
import type { Logger } from 'pino';
import type { RedisConnectionConfig } from '../config.js';
import type { ShardChannel, ShardDelivery, ShardMessage } from './channel.js';
import { markerKey, streamKey } from './keys.js';
import { createRedisClient, describeTarget, reachedNodes, type RedisClient } from './redis-connection.js';
import { forgetConnection } from './redis-outages.js';
import { StreamReader, type RawEntry } from './stream-reader.js';

export { redactUrl } from './redis-connection.js';

const GROUP = 'workers';

export interface RedisStreamsOptions {
  connection: RedisConnectionConfig;
  keyPrefix: string;
  logger: Logger;
}

/** What /readyz and logs say about the channel's connections. */
export interface RedisChannelDescription {
  mode: RedisConnectionConfig['mode'];
  target: string;
  /** Node(s) the commands connection (publish, ack, lock) reaches now. */
  commands: string[];
  /** Node(s) each blocking read connection reaches now, by the kinds it reads. */
  reads: Record<string, string[]>;
}

export class RedisStreamsChannel implements ShardChannel {
  /** Kinds this process has initialised or published: what depth() sums and a lost Redis
   *  re-creates. */
  private readonly known = new Set<string>();
  private readonly commands: RedisClient;
  private readonly readers = new Map<string, StreamReader>();

  constructor(private readonly options: RedisStreamsOptions) {
    this.commands = createRedisClient(options.connection, options.logger, 'commands');
  }

  /** The connection for other users of the same Redis (the leadership lock). */
  get redis(): RedisClient {
    return this.commands;
  }

  get mode(): RedisConnectionConfig['mode'] {
    return this.options.connection.mode;
  }

  /** The stream of a kind. */
  streamKey(kind: string): string {
    return streamKey(this.options.keyPrefix, kind);
  }

  async init(kinds: readonly string[]): Promise<void> {
    for (const kind of kinds) this.known.add(kind);
    await Promise.all(
      kinds.map(async (kind) => {
        try {
          await this.commands.call('XGROUP', 'CREATE', this.streamKey(kind), GROUP, '0', 'MKSTREAM');
        } catch (err) {
          if (!String((err as Error).message).includes('BUSYGROUP')) throw err;
        }
      }),
    );
  }

  async publish(messages: readonly ShardMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const byKind = groupBy(messages, (m) => m.kind);
    const fresh = [...byKind.keys()].filter((k) => !this.known.has(k));
    if (fresh.length > 0) await this.init(fresh);
    // One pipeline per kind: one slot each (a cluster refuses a pipeline across slots).
    await Promise.all(
      [...byKind].map(async ([kind, batch]) => {
        const pipeline = this.commands.pipeline();
        for (const m of batch) pipeline.call('XADD', this.streamKey(kind), '*', 'shard', String(m.shardId), 'scan', String(m.scanId), 'kind', m.kind);
        const results = (await pipeline.exec()) ?? [];
        const failed = results.find(([err]) => err);
        if (failed?.[0]) throw failed[0];
      }),
    );
  }

  /** Kinds read together by one XREADGROUP: all of them on one node, one by one on a cluster. */
  private readGroups(kinds: readonly string[]): string[][] {
    return this.options.connection.mode === 'cluster' ? kinds.map((k) => [k]) : [[...kinds]];
  }

  private reader(consumer: string, kinds: string[]): StreamReader {
    const key = `${consumer}\u0000${kinds.join(',')}`;
    let reader = this.readers.get(key);
    if (!reader) {
      reader = new StreamReader({
        consumer,
        group: GROUP,
        kinds,
        keys: kinds.map((k) => this.streamKey(k)),
        connect: () => createRedisClient(this.options.connection, this.options.logger, 'blocking'),
        recreate: () => this.init(kinds),
      });
      this.readers.set(key, reader);
    }
    return reader;
  }

  async receive(consumer: string, kinds: readonly string[], count: number, blockMs: number): Promise<ShardDelivery[]> {
    if (kinds.length === 0) return [];
    const readers = this.readGroups(kinds).map((g) => this.reader(consumer, g));
    // A read still blocked from the last call goes on; the first to answer ends the wait, and
    // whatever else answered by then comes along.
    await Promise.race(readers.map((r) => r.start(count, blockMs)));
    const entries: (readonly [string, RawEntry])[] = [];
    const own = new Set<string>();
    let error: unknown;
    for (const r of readers) {
      const result = r.take();
      if (!result) continue;
      if ('error' in result) error ??= result.error;
      else {
        entries.push(...result.entries);
        if (result.own) for (const [kind] of result.entries) own.add(kind);
      }
    }
    if (entries.length === 0 && error !== undefined) throw error;
    return this.toDeliveries(entries, (kind) => own.has(kind));
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
          () => true,
        )),
      );
    }
    return out;
  }

  async holders(kinds: readonly string[]): Promise<string[]> {
    const out = new Set<string>();
    for (const kind of kinds) {
      let reply: unknown;
      try {
        reply = await this.commands.call('XINFO', 'CONSUMERS', this.streamKey(kind), GROUP);
      } catch (err) {
        // No stream or no group yet: nobody holds anything there.
        if (/NOGROUP|no such key/i.test(String((err as Error).message))) continue;
        throw err;
      }
      for (const info of Array.isArray(reply) ? reply : []) {
        const fields = fieldMap(info);
        if (Number(fields.get('pending') ?? 0) > 0 && fields.has('name')) out.add(String(fields.get('name')));
      }
    }
    return [...out];
  }

  async releaseConsumer(consumer: string, kinds: readonly string[]): Promise<ShardMessage[]> {
    const out: ShardMessage[] = [];
    for (const kind of kinds) {
      const key = this.streamKey(kind);
      let pending: unknown;
      try {
        pending = await this.commands.call('XPENDING', key, GROUP, '-', '+', '10000', consumer);
      } catch (err) {
        if (/NOGROUP|no such key/i.test(String((err as Error).message))) continue;
        throw err;
      }
      const ids = (Array.isArray(pending) ? pending : []).map((p) => String((p as unknown[])[0]));
      if (ids.length === 0) continue;
      // The entries themselves (XPENDING names them only), then XACK + XDEL in one MULTI (one
      // slot, as ack() does): the shards are published again from PostgreSQL.
      const reads = this.commands.pipeline();
      for (const id of ids) reads.call('XRANGE', key, id, id);
      const entries = ((await reads.exec()) ?? []).flatMap(([err, reply]) => (err || !Array.isArray(reply) ? [] : (reply as RawEntry[])));
      for (const [, fields] of entries) {
        const message = fields ? parseFields(fields) : undefined;
        if (message && message.kind === kind) out.push(message);
      }
      await this.commands
        .multi()
        .call('XACK', key, GROUP, ...ids)
        .call('XDEL', key, ...ids)
        .exec();
    }
    return out;
  }

  /** Entries with the kind of the stream they came from. */
  private async toDeliveries(entries: (readonly [kind: string, entry: RawEntry])[], reclaimed: (kind: string) => boolean): Promise<ShardDelivery[]> {
    const deliveries: ShardDelivery[] = [];
    const junk: ShardDelivery[] = [];
    for (const [kind, [id, fields]] of entries) {
      const message = fields ? parseFields(fields) : undefined;
      if (message && message.kind === kind) deliveries.push({ deliveryId: id, message, reclaimed: reclaimed(kind) });
      // A deleted or malformed entry: acknowledge it so it leaves the pending list.
      else junk.push({ deliveryId: id, message: { shardId: 0, scanId: 0, kind }, reclaimed: true });
    }
    if (junk.length > 0) await this.ack(junk);
    return deliveries;
  }

  async ack(deliveries: readonly ShardDelivery[]): Promise<void> {
    if (deliveries.length === 0) return;
    const byKind = groupBy(deliveries, (d) => d.message.kind);
    // XACK + XDEL of one stream in one MULTI: one slot.
    await Promise.all(
      [...byKind].map(([kind, batch]) => {
        const ids = batch.map((d) => d.deliveryId);
        const key = this.streamKey(kind);
        return this.commands
          .multi()
          .call('XACK', key, GROUP, ...ids)
          .call('XDEL', key, ...ids)
          .exec();
      }),
    );
  }

  async checkLostAndMark(): Promise<boolean> {
    // SET NX answers OK only when a kind's marker was missing: first start, or the master holding
    // that kind's slot lost its data (its stream went with it: same hash tag, same master).
    const lost: string[] = [];
    await Promise.all(
      [...this.known].map(async (kind) => {
        if ((await this.commands.set(markerKey(this.options.keyPrefix, kind), String(Date.now()), 'NX')) === 'OK') lost.push(kind);
      }),
    );
    if (lost.length === 0) return false;
    await this.init(lost);
    return true;
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

  /** Which mode runs and which node(s) each connection reaches (for /readyz). */
  describe(): RedisChannelDescription {
    const reads: Record<string, string[]> = {};
    for (const r of this.readers.values()) reads[r.kinds.join(',')] = r.nodes();
    return { mode: this.mode, target: describeTarget(this.options.connection), commands: reachedNodes(this.commands), reads };
  }

  /** PING, or for a cluster every master it knows (a PING goes to one node only). */
  async ping(): Promise<void> {
    // The first PING waits for the client to be ready (a cluster client has learned its slots).
    await this.commands.ping();
    if (this.commands instanceof Cluster) await Promise.all(this.commands.nodes('master').map((n) => n.ping()));
  }

  async close(): Promise<void> {
    const readers = [...this.readers.values()];
    this.readers.clear();
    forgetConnection(this.commands);
    await Promise.all([...readers.map((r) => r.close()), this.commands.quit().catch(() => this.commands.disconnect())]);
  }
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = out.get(k);
    if (list) list.push(item);
    else out.set(k, [item]);
  }
  return out;
}

/** XINFO's reply for one item: a flat [name, value, ...] list over RESP2, a map over RESP3. */
function fieldMap(info: unknown): Map<string, unknown> {
  const map = new Map<string, unknown>();
  if (Array.isArray(info)) for (let i = 0; i + 1 < info.length; i += 2) map.set(String(info[i]), info[i + 1]);
  else if (info && typeof info === 'object') for (const [k, v] of Object.entries(info)) map.set(k, v);
  return map;
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
