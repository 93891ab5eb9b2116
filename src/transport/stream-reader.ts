// One consumer's blocking XREADGROUP over one read group of streams (all kinds on one node, one
// kind on a cluster), on a connection of its own. A read that is still blocked when the caller
// stops waiting stays in flight and its answer is taken by the next call, so entries are never
// read into a promise nobody looks at.
import { Redis } from 'ioredis';
import { reachedNodes, type RedisClient } from './redis-connection.js';
import { forgetConnection } from './redis-outages.js';

export type RawEntry = [id: string, fields: string[] | null];

/** How long past its BLOCK time a read may stay unanswered before its connection is presumed
 *  lost (a hung server, a silent network). A server that dies closes the connection, which ends
 *  the read at once (see call()). */
const BLOCKING_MARGIN_MS = 1000;

export type ReadResult = { entries: (readonly [kind: string, entry: RawEntry])[]; own: boolean } | { error: unknown };

export interface StreamReaderOptions {
  consumer: string;
  group: string;
  kinds: string[];
  /** Stream key of each kind, same order. */
  keys: string[];
  connect: () => RedisClient;
  /** Re-creates the streams and the group (Redis lost them). */
  recreate: () => Promise<void>;
}

export class StreamReader {
  private conn: RedisClient | undefined;
  private inFlight: { promise: Promise<void>; result?: ReadResult } | undefined;
  /** The consumer's own unacknowledged entries (left by its previous run) are read once, first. */
  private drainedOwn = false;

  constructor(private readonly options: StreamReaderOptions) {}

  get kinds(): string[] {
    return this.options.kinds;
  }

  nodes(): string[] {
    return this.conn ? reachedNodes(this.conn) : ['(not connected)'];
  }

  /** Starts a read unless one is in flight; resolves (never rejects) when that read answers. */
  start(count: number, blockMs: number): Promise<void> {
    if (!this.inFlight) {
      const slot: { promise: Promise<void>; result?: ReadResult } = { promise: Promise.resolve() };
      slot.promise = this.read(count, blockMs).then(
        (result) => void (slot.result = result),
        (error: unknown) => void (slot.result = { error }),
      );
      this.inFlight = slot;
    }
    return this.inFlight.promise;
  }

  /** The answer of the read in flight, once it came (and frees the slot for the next read). */
  take(): ReadResult | undefined {
    const result = this.inFlight?.result;
    if (result) this.inFlight = undefined;
    return result;
  }

  private async read(count: number, blockMs: number): Promise<ReadResult> {
    const { group, consumer, keys, kinds } = this.options;
    const own = !this.drainedOwn;
    const args = own
      ? ['GROUP', group, consumer, 'COUNT', '1000', 'STREAMS', ...keys, ...keys.map(() => '0')]
      : ['GROUP', group, consumer, 'COUNT', String(count), 'BLOCK', String(blockMs), 'STREAMS', ...keys, ...keys.map(() => '>')];
    let reply: unknown;
    try {
      reply = await this.call(args, (own ? 0 : blockMs) + BLOCKING_MARGIN_MS);
    } catch (err) {
      if (err instanceof ConnectionClosed) return { entries: [], own: false };
      if (String((err as Error).message).includes('NOGROUP')) {
        // Redis lost the stream (restart without persistence, a master lost): recreate, read again.
        await this.options.recreate();
        return { entries: [], own: false };
      }
      throw err;
    }
    // Own pending entries are read once, at start; later reads of '0' would repeat them.
    if (own) this.drainedOwn = true;
    return { entries: parseReadReply(reply, (key) => kinds[keys.indexOf(key)]), own };
  }

  /**
   * XREADGROUP on this reader's connection, bounded. That connection does not resend unfinished
   * commands after a reconnect (a resent read could deliver entries nobody waits for), and ioredis
   * then drops the command without settling its promise. So a read ends when its connection
   * closes (the caller reads again at once; the read waits in the offline queue until the server,
   * or the promoted replica, answers), and past the bound the connection is thrown away (a hung
   * server) and the caller's loop retries on a fresh one. A cluster client retries a read whose
   * node died on the slot's new master by itself.
   */
  private call(args: string[], boundMs: number): Promise<unknown> {
    const conn = (this.conn ??= this.options.connect());
    return new Promise((resolve, reject) => {
      const onClose = () => {
        done();
        reject(new ConnectionClosed());
      };
      const timer = setTimeout(() => {
        done();
        if (this.conn === conn) this.conn = undefined;
        forgetConnection(conn);
        conn.disconnect();
        reject(new Error(`XREADGROUP got no answer within ${boundMs} ms (Redis connection lost?); reading again on a new connection`));
      }, boundMs);
      // Only a read already sent can be lost with its connection: one waiting in the offline
      // queue is sent once the connection is ready (or flushed by disconnect() past the bound).
      const watchClose = () => conn.once('close', onClose);
      const done = () => {
        clearTimeout(timer);
        conn.off('close', onClose);
        conn.off('ready', watchClose);
      };
      if (conn instanceof Redis) {
        if (conn.status === 'ready') watchClose();
        else conn.once('ready', watchClose);
      }
      conn.call('XREADGROUP', ...args).then(
        (reply) => (done(), resolve(reply)),
        (err: unknown) => (done(), reject(err)),
      );
    });
  }

  async close(): Promise<void> {
    const conn = this.conn;
    this.conn = undefined;
    // disconnect, not quit: a QUIT would wait behind a blocked read.
    if (conn) forgetConnection(conn);
    conn?.disconnect();
  }
}

class ConnectionClosed extends Error {
  override name = 'ConnectionClosed';
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
