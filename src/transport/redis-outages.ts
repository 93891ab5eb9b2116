// What a process logs when Redis (or one node of a Redis Cluster) goes away and comes back: one
// line when it becomes unreachable and one when it answers again, each naming the node(s), for all
// the connections of the process together (a worker holds one connection for commands and one
// blocking read per kind group; each would otherwise log the same outage).
//
// - Every mode: the first connection of the process that loses Redis logs `Redis unreachable at
//   <target>; retrying` (warn) with the node(s) it last reached; once every connection that lost it
//   is ready again, `Redis reachable again` (info) with the node(s) reached now (after a Sentinel
//   failover, the promoted replica). Lost again within 5 s of that is the same outage going on
//   (debug; warn if it lasts 5 s).
// - Cluster: a master node that a connection fails to reach (refused, reset, timed out) logs
//   `Redis unreachable at cluster node <host:port>; retrying until a replica takes over its slots`
//   (warn) once per process, however often each connection's slot refresh re-adds it and fails
//   again; `Redis reachable again` (info) with that node follows once its slots are served again:
//   by a promoted replica (named in `nodes`), or by the node itself when it answers again. A
//   replica, or a live node a slot refresh drops and re-adds, is logged at debug only.
import { Cluster, type Redis } from 'ioredis';
import type { Logger } from 'pino';

type Client = Redis | Cluster;

/** host:port of one node connection of a cluster client. */
export function nodeKey(redis: Redis): string {
  return `${redis.options.host}:${redis.options.port}`;
}

/** How long a node whose slots went to another master stays known as such: a slower connection of
 *  the same process may still drop it (one more slot refresh) without a second line. */
const REPLACED_MEMORY_MS = 60_000;

/** An outage that starts this soon after the last one ended is the same one going on. */
const RELAPSE_MS = 5000;

interface LeftNode {
  since: number;
  /** A slot the node served when it left: who serves it now tells when the outage is over. */
  slot: number | undefined;
  /** Set when its slots were seen served by another master. */
  replacedAt?: number;
}

export class RedisOutages {
  /** Every connection of the process to the target that is not closed for good. */
  private readonly clients = new Set<Client>();
  /** Connections that lost Redis and are not ready again. */
  private readonly down = new Set<Client>();
  private downSince = 0;
  private recoveredAt = -Infinity;
  /** Whether the outage in progress was logged at warn (a relapse is not, unless it lasts). */
  private logged = false;
  private lastReached: string[];
  private readonly left = new Map<string, LeftNode>();

  constructor(
    private readonly log: Logger,
    private readonly where: string,
    /** The configured node(s), named before any connection reached one. */
    configured: string[],
    private readonly reached: (client: Client) => string[],
  ) {
    this.lastReached = configured;
  }

  watch(client: Client): void {
    watched.set(client, this);
    let lastError: Error | undefined;
    client.on('error', (err: Error) => {
      lastError = err;
      // A cluster client that is ready reports node-level trouble here (a slot refresh that
      // failed on one node): the node lines below say what an operator needs.
      if (client instanceof Cluster && client.status === 'ready') this.log.debug({ err: { message: err.message } }, 'Redis cluster client error');
      else if (client.status !== 'ready') this.lost(client, lastError);
    });
    // Emitted only when the client will retry: a loss, never a quit.
    client.on('reconnecting', () => this.lost(client, lastError));
    client.on('ready', () => {
      lastError = undefined;
      this.ready(client);
    });
    this.clients.add(client);
    // An end its owner did not ask for is an outage going on (the client is connected again).
    client.on('end', () => (closedByOwner.has(client) ? this.ended(client) : this.lost(client, lastError)));
    if (client instanceof Cluster) {
      // A node is unreachable when connecting to it fails, not when a connection to it ends: a
      // slot refresh also drops and re-adds live nodes (a partial CLUSTER SLOTS reply during a
      // failover, a stale connection replaced), and those must not read as an outage.
      client.on('node error', (err: Error, key: string) => {
        if (client.status === 'disconnecting' || client.status === 'end') return; // closing
        if (isNetworkError(err)) this.nodeUnreachable(client, key, err);
      });
      client.on('-node', (redis: Redis) => this.log.debug({ node: nodeKey(redis) }, 'Redis cluster node left the client'));
      client.on('+node', (redis: Redis) => {
        const key = nodeKey(redis);
        redis.once('ready', () => this.nodeReady(key));
      });
      client.on('refresh', () => this.refreshed(client));
    }
  }

  /** A connection closed for good (its owner closed it: a read thrown away past its bound, a
   *  shutdown). If it was the last one still down, the outage is over when another is ready. */
  ended(client: Client): void {
    this.clients.delete(client);
    if (!this.down.delete(client) || this.down.size > 0) return;
    const ready = [...this.clients].find((c) => c.status === 'ready');
    if (ready) this.recovered(ready);
  }

  private lost(client: Client, err: Error | undefined): void {
    if (this.down.has(client)) return;
    this.down.add(client);
    if (this.down.size > 1) return;
    this.downSince = Date.now();
    const fields = { err: err ? { message: err.message } : undefined, nodes: this.lastReached };
    const msg = `Redis unreachable at ${this.where}; retrying`;
    if (this.downSince - this.recoveredAt >= RELAPSE_MS) {
      this.logged = true;
      this.log.warn(fields, msg);
      return;
    }
    // Lost again right after it came back (a Sentinel failover: a connection that reached the
    // replica before its promotion is told READONLY and reconnects): the same outage. Said at
    // warn only if it lasts.
    this.logged = false;
    this.log.debug(fields, msg);
    const since = this.downSince;
    setTimeout(() => {
      if (this.down.size === 0 || this.downSince !== since || this.logged) return;
      this.logged = true;
      this.log.warn(fields, msg);
    }, RELAPSE_MS).unref();
  }

  private ready(client: Client): void {
    const nodes = this.reached(client);
    if (nodes.length > 0 && !nodes.some((n) => n.startsWith('('))) this.lastReached = nodes;
    if (!this.down.delete(client) || this.down.size > 0) return;
    this.recovered(client);
  }

  private recovered(client: Client): void {
    this.recoveredAt = Date.now();
    const fields = { nodes: this.reached(client), downMs: this.recoveredAt - this.downSince };
    if (this.logged) this.log.info(fields, 'Redis reachable again');
    else this.log.debug(fields, 'Redis reachable again');
  }

  private nodeUnreachable(client: Cluster, key: string, err: Error): void {
    const known = this.left.get(key);
    if (known && (known.replacedAt === undefined || Date.now() - known.replacedAt < REPLACED_MEMORY_MS)) return;
    // Only a master that serves slots in this client's map is an outage; a replica is not.
    const slot = slotOf(client, key);
    if (slot === undefined) {
      this.log.debug({ node: key, err: { message: err.message } }, 'Redis cluster replica unreachable');
      return;
    }
    this.left.set(key, { since: Date.now(), slot });
    this.log.warn({ node: key, err: { message: err.message } }, `Redis unreachable at cluster node ${key}; retrying until a replica takes over its slots`);
  }

  private nodeReady(key: string): void {
    const node = this.left.get(key);
    if (!node) return;
    this.left.delete(key);
    if (node.replacedAt === undefined) this.log.info({ node: key, nodes: [key], downMs: Date.now() - node.since }, 'Redis reachable again');
    else this.log.debug({ node: key }, 'Redis cluster node answers again');
  }

  private refreshed(client: Cluster): void {
    const now = Date.now();
    for (const [key, node] of this.left) {
      if (node.replacedAt !== undefined) {
        if (now - node.replacedAt >= REPLACED_MEMORY_MS) this.left.delete(key);
        continue;
      }
      const servedBy = node.slot === undefined ? undefined : (client.slots[node.slot]?.[0] ?? undefined);
      if (servedBy === undefined || servedBy === key) continue;
      node.replacedAt = now;
      this.log.info({ node: key, nodes: [servedBy], downMs: now - node.since }, 'Redis reachable again');
    }
  }
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'EPIPE', 'ECONNABORTED']);

/** A failure to reach a node (refused, reset, no route, connect timeout), not a reply error. */
function isNetworkError(err: Error): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code !== undefined && NETWORK_CODES.has(code);
}

/** The first slot a cluster client's map has `key` as the master of. */
function slotOf(client: Cluster, key: string): number | undefined {
  const slots = client.slots;
  for (let i = 0; i < slots.length; i += 1) if (slots[i]?.[0] === key) return i;
  return undefined;
}

const byTarget = new Map<string, RedisOutages>();
const watched = new WeakMap<Client, RedisOutages>();
const closedByOwner = new WeakSet<Client>();

/** The owner of a connection throws it away (disconnect() of a client that is reconnecting emits
 *  no 'end'): it no longer counts as down. Every owner says so before it closes a connection, so
 *  an 'end' nobody asked for is told apart (redis-connection.ts connects such a client again). */
export function forgetConnection(client: Client): void {
  closedByOwner.add(client);
  watched.get(client)?.ended(client);
}

/** Whether the client's owner closed it (forgetConnection). */
export function isClosedByOwner(client: Client): boolean {
  return closedByOwner.has(client);
}

/** The one outage log of this process for a Redis target (by its description). */
export function outagesOf(where: string, create: () => RedisOutages): RedisOutages {
  let outages = byTarget.get(where);
  if (!outages) {
    outages = create();
    byTarget.set(where, outages);
  }
  return outages;
}
