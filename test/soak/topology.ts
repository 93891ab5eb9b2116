// The soak's topologies (test/soak/args.ts): the servers each one starts (with the test helpers,
// which track them for stopAllServers()), its kinds and where their orders and timeouts live, and
// the faults its nemesis adds to the ones every topology gets (run.ts: SIGKILL and SIGSTOP of a
// fleet process, the center's backends terminated).
import type pg from 'pg';
import type { ConfigInput } from '../../dist/config.js';
import { cancel } from '../../dist/schedule.js';
import { leaderLockKey, streamKey } from '../../dist/transport/keys.js';
import { createOrdersSchema } from '../helpers/orders.ts';
import { cli, startRedisCluster, startSentinelGroup, type RedisProcess } from '../helpers/redis-ha.ts';
import { startPostgres, startRedis, type PostgresServer } from '../helpers/servers.ts';
import { silentProxyTo, type SilentProxy } from '../helpers/silent-proxy.ts';
import type { Topology } from './args.ts';
import { COUNTED_CLOSE, LEASE_MS, LOCAL, pick, random, REMOTE, sleep, STORED, waitUntil, type Db, type FaultResult } from './common.ts';
import { quietPool } from '../helpers/quiet-pool.ts';

const PREFIX = 'soak';
const STORES = ['orders_0', 'orders_1', 'orders_2'] as const;

export interface Payments {
  paid: number;
  refused: number;
  cancelled: number;
  errors: number;
}

/** A database holding orders, the kind whose orders they are, and where that kind's timeouts live. */
export interface OrdersDb extends Db {
  kind: string;
  timeouts: Db;
}

export interface SoakKind {
  kind: string;
  /** n orders with ids [from, from + n) and their timeouts due at dueSql, the kind's way. */
  insert(from: number, n: number, dueSql: string): Promise<void>;
  /** The README's payment at the due instant: cancel first, then the guarded UPDATE whose row
   *  count decides. Counts a cancel that committed in `tally`; true when the order is paid. */
  pay(id: number, tally: Payments): Promise<boolean>;
}

export interface SetUp {
  topology: Topology;
  /** One line for the log: what runs. */
  describe: string;
  config: ConfigInput;
  env: Record<string, string | undefined>;
  /** Where timeouts live: the center first, then the stores. */
  timeoutsDbs: Db[];
  ordersDbs: OrdersDb[];
  kinds: SoakKind[];
  /** The nemesis draws its next action from this deck (an action twice: twice as likely). */
  deck: readonly string[];
  /** The topology's own actions, by the name the deck gives them. */
  faults: Record<string, () => Promise<FaultResult | undefined>>;
  /** Ends the pools opened here (the servers are stopped by stopAllServers()). */
  close(): Promise<void>;
}

const KIND_DEFAULTS = { shardSize: 200, maxAttempts: 10, backoffMs: 200, timeLimitMs: 2000 } as const;

function baseConfig(): Omit<ConfigInput, 'kinds'> {
  return {
    redisKeyPrefix: PREFIX,
    poolSize: 4,
    breaker: { consecutiveFailures: 3, halfOpenAfterMs: 1000, maxRetryDelayMs: 3000 },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 2000 },
    worker: { leaseMs: LEASE_MS, blockMs: 200, concurrency: 3, drainTimeoutMs: 2000 },
    alerts: { lagSlaMs: 600_000 },
    // Above the kinds' 2 s time limit, short enough that a silenced connection (the single
    // topology's silent-* faults) is dropped within the fault's window.
    databaseSilenceMs: 4000,
  };
}

async function withCountedCloses(pool: pg.Pool): Promise<void> {
  await createOrdersSchema(pool);
  await pool.query('ALTER TABLE orders ADD COLUMN IF NOT EXISTS closes int NOT NULL DEFAULT 0');
}

const series = (from: number, n: number) => `SELECT g FROM generate_series(${from}, ${from + n - 1}) g`;

/** The payment in the one database that holds both the order and its timeout. */
async function payInOne(pool: pg.Pool, kind: string, id: number, tally: Payments): Promise<boolean> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const cancelled = await cancel(client, kind, id);
    const paid = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
    await client.query('COMMIT');
    if (cancelled) tally.cancelled += 1;
    return paid.rowCount === 1;
  } catch (err) {
    broken = err as Error;
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release(broken); // a connection that met an error is not reused
  }
}

/** order.unpaid: orders and timeouts in the center's database (the same-database path). */
function localKind(center: Db): SoakKind {
  return {
    kind: LOCAL,
    async insert(from, n, dueSql) {
      await center.pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM (${series(from, n)}) s (g)`);
      await center.pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, ${dueSql} FROM (${series(from, n)}) s (g)`, [
        LOCAL,
      ]);
    },
    pay: (id, tally) => payInOne(center.pool, LOCAL, id, tally),
  };
}

/** order.remote: timeouts in the center, orders in a business database (the external path). */
function remoteKind(center: Db, business: Db): SoakKind {
  return {
    kind: REMOTE,
    async insert(from, n, dueSql) {
      await business.pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM (${series(from, n)}) s (g)`);
      await center.pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, ${dueSql} FROM (${series(from, n)}) s (g)`, [
        REMOTE,
      ]);
    },
    async pay(id, tally) {
      // Two databases: cancel in the center first, then the guarded payment in the orders'.
      if (await cancel(center.pool, REMOTE, id)) tally.cancelled += 1;
      const paid = await business.pool.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
      return paid.rowCount === 1;
    },
  };
}

/** order.stored: each order and its timeout in one statement of the store `id % 3` routes to. */
function storedKind(stores: Db[]): SoakKind {
  return {
    kind: STORED,
    async insert(from, n, dueSql) {
      // A store that is down refuses its share; the others take theirs.
      const results = await Promise.allSettled(
        stores.map((s, i) =>
          s.pool.query(
            `WITH o AS (INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM (${series(from, n)}) s (g) WHERE g % ${stores.length} = ${i} RETURNING id)
             INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, id::text, ${dueSql} FROM o`,
            [STORED],
          ),
        ),
      );
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    },
    pay: (id, tally) => payInOne(stores[id % stores.length]!.pool, STORED, id, tally),
  };
}

/** The business database of single, cluster and sentinel: a private PostgreSQL the nemesis restarts. */
async function businessDatabase(): Promise<{ server: PostgresServer; db: Db }> {
  const server = await startPostgres();
  const admin = quietPool(server.url(), 1);
  await admin.query('CREATE DATABASE orders');
  await admin.end();
  const db = { name: 'business', pool: quietPool(server.url('orders'), 8) };
  await withCountedCloses(db.pool);
  return { server, db };
}

function restartBusiness(server: PostgresServer) {
  return async (): Promise<FaultResult> => {
    await server.restart('immediate');
    const doneMs = Date.now();
    return { type: 'business PostgreSQL restarted -m immediate', doneMs, backMs: doneMs, endMs: doneMs + 2000, scope: ['business'] };
  };
}

/** Every connection open through `proxy` goes silent (no reply, no close: a dropped firewall or
 *  NAT entry); new ones pass. The processes must notice on their own (Redis: 5 s; PostgreSQL:
 *  databaseSilenceMs, 4 s here) and reconnect. */
function silence(proxy: SilentProxy, what: string, noticeMs: number, scope?: string[]) {
  return async (): Promise<FaultResult> => {
    const n = proxy.silence();
    const doneMs = Date.now();
    return {
      type: `${what} connections silent`,
      doneMs,
      backMs: doneMs,
      endMs: doneMs + noticeMs + 2000,
      ...(scope ? { scope } : {}),
      detail: { connections: n },
    };
  };
}

/** Redis killed (no persistence: its data gone) and started again empty on its port. */
function restartRedisEmpty(redis: Awaited<ReturnType<typeof startRedis>>) {
  return async (): Promise<FaultResult> => {
    await redis.kill();
    await sleep(500);
    await redis.start();
    const doneMs = Date.now();
    return { type: 'Redis restarted empty', doneMs, backMs: doneMs, endMs: doneMs + 2000 };
  };
}

/** centerUrl: the center's database, as the fleet reaches it unless the topology says otherwise. */
export async function setUp(topology: Topology, center: Db, centerUrl: string): Promise<SetUp> {
  await withCountedCloses(center.pool);
  const kindConfig = (database?: string) => ({ ...KIND_DEFAULTS, handler: { type: 'sql' as const, sql: COUNTED_CLOSE, ...(database ? { database } : {}) } });

  if (topology === 'stores') {
    const redis = await startRedis();
    const servers = await Promise.all(STORES.map(() => startPostgres()));
    const stores: Db[] = servers.map((s, i) => ({ name: STORES[i]!, pool: quietPool(s.url(), 8) }));
    await Promise.all(stores.map((s) => withCountedCloses(s.pool)));
    let turn = 0;
    const crashStore = async (): Promise<FaultResult> => {
      // Each store in turn; SIGKILL of the postmaster and `pg_ctl stop -m immediate` alternate
      // (store i meets both over the run: 3 stores, 2 ways).
      const i = turn % STORES.length;
      const how = turn % 2 === 0 ? 'SIGKILL' : 'immediate';
      turn += 1;
      const server = servers[i]!;
      const t0 = Date.now();
      if (how === 'SIGKILL') await server.kill();
      else await server.stopImmediately();
      await sleep(1000 + random() * 2000);
      // After a SIGKILL the old backends leave when they notice their postmaster is gone; until
      // then the new postmaster refuses to start (shared memory still in use): try again.
      for (let attempt = 1; ; attempt += 1) {
        try {
          await server.start();
          break;
        } catch (err) {
          if (attempt >= 40) throw err;
          await sleep(250);
        }
      }
      const doneMs = Date.now();
      return {
        type: how === 'SIGKILL' ? 'store PostgreSQL SIGKILLed, restarted' : 'store PostgreSQL stopped -m immediate, restarted',
        target: STORES[i]!,
        doneMs,
        backMs: doneMs,
        endMs: doneMs + 2000,
        scope: [STORES[i]!],
        detail: { downMs: doneMs - t0 },
      };
    };
    return {
      topology,
      describe: `center + ${STORES.length} stores (private PostgreSQL each, ports ${servers.map((s) => s.port).join(', ')}), Redis :${redis.port}`,
      config: {
        ...baseConfig(),
        businessDatabases: Object.fromEntries(STORES.map((name, i) => [name, { url: servers[i]!.url(), poolSize: 4 }])),
        kinds: {
          [LOCAL]: kindConfig(),
          [STORED]: { ...kindConfig(), store: 'beside', handler: { type: 'sql', sql: COUNTED_CLOSE, route: { by: 'modulo', databases: [...STORES] } } },
        },
      },
      env: { REDIS_URL: redis.url },
      timeoutsDbs: [center, ...stores],
      ordersDbs: [{ ...center, kind: LOCAL, timeouts: center }, ...stores.map((s) => ({ ...s, kind: STORED, timeouts: s }))],
      kinds: [localKind(center), storedKind(stores)],
      deck: ['kill', 'kill', 'stop', 'stop', 'redis', 'store-pg', 'store-pg', 'terminate'],
      faults: { redis: restartRedisEmpty(redis), 'store-pg': crashStore },
      close: async () => void (await Promise.all(stores.map((s) => s.pool.end().catch(() => {})))),
    };
  }

  // single, cluster, sentinel: the center's kind and the external kind on a business database;
  // they differ in Redis.
  const { server: business, db: businessDb } = await businessDatabase();
  const common = {
    topology,
    config: {
      ...baseConfig(),
      businessDatabases: { orders: { urlEnv: 'ORDERS_URL', poolSize: 4 } },
      kinds: { [LOCAL]: kindConfig(), [REMOTE]: kindConfig('orders') },
    },
    timeoutsDbs: [center],
    ordersDbs: [
      { ...center, kind: LOCAL, timeouts: center },
      { ...businessDb, kind: REMOTE, timeouts: center },
    ],
    kinds: [localKind(center), remoteKind(center, businessDb)],
    close: () => businessDb.pool.end().catch(() => {}),
  };
  const ordersEnv = { ORDERS_URL: business.url('orders') };

  if (topology === 'single') {
    const redis = await startRedis();
    // The fleet reaches Redis, the center and the business database through silent proxies (the
    // soak's own pools go direct): the silent-* faults.
    const [viaRedis, viaCenter, viaBusiness] = await Promise.all([silentProxyTo(redis.url), silentProxyTo(centerUrl), silentProxyTo(ordersEnv.ORDERS_URL)]);
    const proxies = [viaRedis.proxy, viaCenter.proxy, viaBusiness.proxy];
    return {
      ...common,
      describe: `center, business PostgreSQL :${business.port}, Redis :${redis.port}, each through a silent proxy`,
      env: { REDIS_URL: viaRedis.url, DATABASE_URL: viaCenter.url, ORDERS_URL: viaBusiness.url },
      deck: ['kill', 'kill', 'stop', 'stop', 'redis', 'business-pg', 'terminate', 'silent-redis', 'silent-center', 'silent-business'],
      faults: {
        redis: restartRedisEmpty(redis),
        'business-pg': restartBusiness(business),
        'silent-redis': silence(viaRedis.proxy, 'Redis', 5000),
        // The silenced sessions' transactions keep their row locks until the server ends them
        // (idle_in_transaction_session_timeout, 10 s here): inside the fault's window.
        'silent-center': silence(viaCenter.proxy, 'center PostgreSQL', 14_000),
        'silent-business': silence(viaBusiness.proxy, 'business PostgreSQL', 14_000, ['business']),
      },
      close: async () => {
        await common.close();
        await Promise.all(proxies.map((p) => p.close()));
      },
    };
  }

  if (topology === 'cluster') {
    const cluster = await startRedisCluster();
    // The master that serves a kind's stream or the leader lock: the kill that matters.
    const keys = [...Object.keys(common.config.kinds).map((k) => streamKey(PREFIX, k)), leaderLockKey(PREFIX)];
    const failover = async (): Promise<FaultResult> => {
      const key = pick(keys);
      const victimPort = await cluster.masterOf(key);
      const victim = cluster.nodes.find((n) => n.port === victimPort);
      if (!victim) throw new Error(`no live master serves ${key} (CLUSTER NODES named ${victimPort})`);
      const t0 = Date.now();
      await victim.kill();
      let promoted = -1;
      await waitUntil(
        `a replica promoted for ${key}`,
        async () => {
          promoted = await cluster.masterOf(key);
          return promoted !== -1 && promoted !== victimPort;
        },
        30_000,
      );
      const promotedMs = Date.now() - t0;
      // The old master comes back and rejoins as the promoted one's replica.
      await victim.start();
      await waitUntil(`127.0.0.1:${victimPort} rejoined as a replica in sync`, () => replicaInSync(victim), 60_000);
      const doneMs = Date.now();
      return {
        type: 'Redis Cluster master SIGKILLed, replica promoted, old master rejoined',
        target: `127.0.0.1:${victimPort} (${key})`,
        doneMs,
        backMs: t0 + promotedMs,
        endMs: t0 + promotedMs + 2000,
        detail: { promotedMs, rejoinedMs: doneMs - t0, promotedPort: promoted },
      };
    };
    const recreate = async (): Promise<FaultResult> => {
      await cluster.restartEmpty();
      const doneMs = Date.now();
      return { type: 'Redis Cluster recreated empty', doneMs, backMs: doneMs, endMs: doneMs + 2000 };
    };
    return {
      ...common,
      describe: `center, business PostgreSQL :${business.port}, Redis Cluster ${cluster.seeds}`,
      env: { REDIS_URL: undefined, REDIS_CLUSTER: cluster.seeds, ...ordersEnv },
      deck: ['kill', 'kill', 'stop', 'stop', 'redis-failover', 'redis-failover', 'redis-empty', 'business-pg', 'terminate'],
      faults: { 'redis-failover': failover, 'redis-empty': recreate, 'business-pg': restartBusiness(business) },
    };
  }

  // sentinel
  const group = await startSentinelGroup();
  const failover = async (): Promise<FaultResult | undefined> => {
    const masterPort = await group.primaryPort();
    const [victim, other] = masterPort === group.primary.port ? [group.primary, group.replica] : [group.replica, group.primary];
    if (victim.port !== masterPort) throw new Error(`the sentinels name :${masterPort}, neither of the group's servers`);
    // A kill before the replica is in sync would leave nothing to promote: wait for it (it is
    // when the previous failover's old master has rejoined).
    await waitUntil(`:${other.port} a replica in sync`, () => replicaInSync(other), 30_000);
    const t0 = Date.now();
    await victim.kill();
    await waitUntil(
      `the sentinels promote :${other.port}`,
      async () => (await group.primaryPort()) === other.port && (await cli(other.port, 'ROLE')).startsWith('master'),
      60_000,
    );
    const promotedMs = Date.now() - t0;
    // Started again empty, the old master is told by the sentinels to replicate the new one.
    await victim.start();
    await waitUntil(`:${victim.port} turned replica of :${other.port} by the sentinels`, () => replicaInSync(victim), 60_000);
    const doneMs = Date.now();
    return {
      type: 'Sentinel master SIGKILLed, replica promoted, old master rejoined',
      target: `127.0.0.1:${victim.port}`,
      doneMs,
      backMs: t0 + promotedMs,
      endMs: t0 + promotedMs + 2000,
      detail: { promotedMs, rejoinedMs: doneMs - t0, promotedPort: other.port },
    };
  };
  return {
    ...common,
    describe: `center, business PostgreSQL :${business.port}, Redis Sentinel ${group.name} (master :${group.primary.port}, replica :${group.replica.port}, sentinels ${group.seeds})`,
    env: { REDIS_URL: undefined, REDIS_SENTINELS: group.seeds, REDIS_SENTINEL_NAME: group.name, ...ordersEnv },
    deck: ['kill', 'kill', 'stop', 'stop', 'redis-failover', 'redis-failover', 'business-pg', 'terminate'],
    faults: { 'redis-failover': failover, 'business-pg': restartBusiness(business) },
  };
}

/** ROLE says replica, its link to the master up (`connected`: the initial sync is done). */
async function replicaInSync(node: RedisProcess): Promise<boolean> {
  if (!node.alive) return false;
  const role = (await cli(node.port, 'ROLE')).split('\n');
  return role[0] === 'slave' && role[3] === 'connected';
}
