// Assembles a process as a list of services (service.ts): connections (checked up front, with
// errors that say what to do), the worker and/or the coordinator, the health server; stop() stops
// them in reverse order, every step even when one fails.
import { TracingService } from './observability/tracing.js';
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { databaseSilenceMs, type LoadedConfig } from './config.js';
import { Coordinator } from './coordinator/coordinator.js';
import type { LeaderLock } from './coordinator/leader-lock.js';
import { Leadership } from './coordinator/leadership.js';
import { syncKinds } from './db/kinds.js';
import { syncRoutes } from './db/routes.js';
import { syncTargets } from './db/targets.js';
import { checkSchemaContract, judgeSchema, readSchemaContract, thisBuild, type SchemaContractError } from './release/schema-contract.js';
import { ProcessRegistry } from './release/process-registry.js';
import { VERSION } from './version.js';
import { createPool } from './db/pool.js';
import { reachedHost, reachedHosts } from './db/reached-hosts.js';
import { startHealthServer, type HealthServer } from './observability/http.js';
import { Metrics } from './observability/metrics.js';
import type { ShardChannel } from './transport/channel.js';
import { leaderLockKey } from './transport/keys.js';
import { describeTarget } from './transport/redis-connection.js';
import { RedisStreamsChannel } from './transport/redis-streams.js';
import { service, ServiceGroup, type Service } from './service.js';
import { centerKinds, storeLayout } from './stores/layout.js';
import { LeaderBalance } from './stores/leader-balance.js';
import { storeCoordinators } from './stores/store-coordinators.js';
import { Worker } from './worker/worker.js';
import { checkPostgres, redactDbUrl, UnreachableError } from './db/reachability.js';
import { within } from './bounded.js';

export { checkPostgres, redactDbUrl, UnreachableError };

export async function checkRedis(channel: RedisStreamsChannel, target: string, timeoutMs = 5000): Promise<void> {
  try {
    await within(channel.ping(), timeoutMs, `no answer within ${timeoutMs} ms`);
  } catch (err) {
    const hint =
      channel.mode === 'single' ? 'REDIS_URL' : channel.mode === 'cluster' ? 'REDIS_CLUSTER (or redis.cluster)' : 'REDIS_SENTINELS and REDIS_SENTINEL_NAME';
    throw new UnreachableError(`cannot reach Redis at ${target}: ${(err as Error).message}. Is the server running and ${hint} right?`, {
      cause: err,
    });
  }
}

/** pool.end() waits for every checked-out client. After a drain that ran out of time, a shard's
 *  code may still hold one (its session already ended and rolled back by the worker): the exit
 *  must not wait for that code. */
async function endPool(pool: pg.Pool, logger: Logger, boundMs = 2000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), boundMs);
    timer.unref();
  });
  const ended = await Promise.race([pool.end().then(() => true as const), bound]);
  clearTimeout(timer);
  if (!ended) logger.warn({ boundMs }, 'PostgreSQL connections still checked out after the bound; not waiting for them');
}

export interface RuntimeOptions {
  config: LoadedConfig;
  logger: Logger;
  coordinator: boolean;
  worker: boolean;
  /** Set up handlers before start (code handlers registered in TypeScript). */
  configureWorker?: (worker: Worker) => void;
  /** Embedded single-process mode (the demo): a shard channel and a leadership lock that need no
   *  Redis (InProcessChannel, LocalLeaderLock); config.redisConnection is then not used. Default:
   *  Redis Streams and redlock on config.redisConnection (one node, Cluster or Sentinel). */
  embedded?: { channel: ShardChannel; leaderLock: LeaderLock };
  /** More services of the process (the console of `--console`): started last, stopped first. */
  services?: Service[];
  /** The schema changed under the running process to one this version may not run on
   *  (process-registry.ts): the CLI stops the process and exits 3. Default: the runtime stops. */
  onIncompatibleSchema?: (err: SchemaContractError) => void;
}

export interface Runtime {
  coordinator: Coordinator | undefined;
  worker: Worker | undefined;
  metrics: Metrics;
  pool: pg.Pool;
  channel: ShardChannel;
  health: HealthServer | undefined;
  /** Graceful stop: drain the worker, give up leadership, close connections. Idempotent. */
  stop(options?: { drainTimeoutMs?: number }): Promise<void>;
}

function pickKinds(kinds: LoadedConfig['kinds'], names: string[]): LoadedConfig['kinds'] {
  return Object.fromEntries(names.map((k) => [k, kinds[k]!]));
}

export async function startRuntime(options: RuntimeOptions): Promise<Runtime> {
  const { config, logger } = options;
  const role = options.coordinator && options.worker ? 'all' : options.coordinator ? 'coordinator' : 'worker';
  const metrics = new Metrics(role);
  const poolSize = config.poolSize + (options.worker ? config.worker.concurrency : 0);
  const pool = createPool({
    connectionString: config.databaseUrl,
    max: poolSize,
    applicationName: `timeout-center ${role}`,
    logger,
    // A paused or hung worker must not hold shard locks forever.
    idleInTransactionTimeoutMs: Math.max(config.worker.leaseMs, 10_000),
    silentAfterMs: databaseSilenceMs(config),
  });
  const redisChannel = options.embedded ? undefined : new RedisStreamsChannel({ connection: config.redisConnection, keyPrefix: config.redisKeyPrefix, logger });
  const channel: ShardChannel = options.embedded?.channel ?? redisChannel!;
  let coordinator: Coordinator | undefined;
  let worker: Worker | undefined;
  let health: HealthServer | undefined;
  let drainOverride: number | undefined;

  // The process as services, started in this order and stopped in reverse (ServiceGroup): each
  // stop runs even if another fails, and a start that fails stops what already started.
  const services: Service[] = [
    // OpenTelemetry, when the OTEL_* variables configure it: started first, so its spans cover the
    // whole run, and stopped last, exporting what is buffered.
    new TracingService(logger),
    service(
      'postgres',
      () => {},
      () => endPool(pool, logger),
    ),
    service(
      redisChannel ? 'redis' : 'channel',
      () => {},
      () => channel.close(),
    ),
    service(
      'checks',
      async () => {
        await checkPostgres(pool, config.databaseUrl);
        if (redisChannel) {
          await checkRedis(redisChannel, describeTarget(config.redisConnection));
          logger.info(redisChannel.describe(), `Redis: ${redisChannel.mode}`);
        }
        // The schema contract (docs/upgrading.md): refuses a schema older than this build needs,
        // or one migrated past what this version may run on; runs on a newer compatible one.
        const verdict = await checkSchemaContract(pool);
        logger.info({ version: VERSION, schema: verdict.state }, verdict.message);
        await syncKinds(pool, config.kinds);
        await syncRoutes(pool, config.kinds);
        await syncTargets(pool, config.businessDatabases);
        await channel.init(centerKinds(config.kinds));
      },
      () => {},
    ),
  ];
  // This process in timeout_center.processes (its version, for `status`, the console and migrate),
  // and the schema contract read again every 5 s.
  const stopper: { stop?: () => Promise<void> } = {};
  services.push(
    new ProcessRegistry({
      pool,
      role,
      logger,
      onIncompatible: options.onIncompatibleSchema ?? (() => void stopper.stop?.()),
    }),
  );
  if (options.worker) {
    const w = new Worker({ config, pool, channel, metrics, logger });
    options.configureWorker?.(w);
    worker = w;
    services.push(
      service(
        'worker',
        () => w.start(),
        () => w.stop(drainOverride ?? config.worker.drainTimeoutMs),
      ),
    );
  }
  if (options.coordinator) {
    const coordinatorId = `${hostname()}-${process.pid}`;
    const leadership = new Leadership({
      redis: redisChannel?.redis,
      lock: options.embedded?.leaderLock,
      pool,
      lockKey: leaderLockKey(config.redisKeyPrefix),
      ttlMs: config.coordinator.lockTtlMs,
      coordinatorId,
      logger,
    });
    // The center's coordinator plans the kinds stored in the center's database; each store has a
    // coordinator of its own (stores/store-coordinators.ts).
    const stores = storeLayout(config.kinds);
    const centerConfig: LoadedConfig = stores.size === 0 ? config : { ...config, kinds: pickKinds(config.kinds, centerKinds(config.kinds)) };
    coordinator = new Coordinator({ config: centerConfig, pool, channel, leadership, metrics, logger, coordinatorId });
    services.push(coordinator);
    if (stores.size > 0) {
      if (options.embedded || !redisChannel) {
        throw new Error('kinds stored beside their orders (store: beside) need Redis: the embedded mode serves the center database only');
      }
      // The center and the stores shared between the coordinator processes (stores/leader-balance.ts).
      const balance = new LeaderBalance({
        redis: redisChannel.redis,
        key: `${leaderLockKey(config.redisKeyPrefix)}:coordinators`,
        coordinatorId,
        ttlMs: config.coordinator.lockTtlMs,
        logger,
      });
      balance.register('center', leadership);
      services.push(
        ...storeCoordinators({ config, metrics, logger, coordinatorId, centerPool: pool, endPool: (p) => endPool(p, logger), balance }),
        balance.service(),
      );
    }
  }
  if (config.httpPort !== undefined) {
    const c = coordinator;
    const port = config.httpPort;
    services.push(
      service(
        'http',
        async () => {
          health = await startHealthServer({
            port,
            metrics,
            logger,
            checks: {
              // Which host the center's pool reaches, and every other pool of the process (stores,
              // business databases, heartbeat): with a multi-host connection string, where a
              // failover left each one.
              postgres: async () => {
                await pool.query('SELECT 1');
                return { ok: true, host: reachedHost(pool)?.host, target: reachedHost(pool)?.target, pools: reachedHosts() };
              },
              ...(redisChannel
                ? { redis: async () => (await redisChannel.ping(), { ok: true, ...redisChannel.describe() }) }
                : { channel: async () => ({ ok: true, transport: 'in-process' }) }),
              ...(c ? { coordinator: async () => ({ ok: true, leader: c.isLeader }) } : {}),
              // This build and the schema it meets: not ready once the schema was migrated past
              // what this version runs (the process then stops: process-registry.ts).
              schema: async () => {
                const verdict = judgeSchema(await readSchemaContract(pool), thisBuild());
                if (!verdict.ok) throw new Error(verdict.message);
                return { ok: true, version: VERSION, state: verdict.state };
              },
            },
          });
        },
        () => health?.close(),
      ),
    );
  }
  services.push(...(options.services ?? []));
  const process_ = new ServiceGroup('timeout-center', services, logger);
  await process_.start();

  let stopping: Promise<void> | undefined;
  stopper.stop = () => (stopping ??= process_.stop());
  return {
    coordinator,
    worker,
    metrics,
    pool,
    channel,
    health,
    stop(stopOptions) {
      drainOverride = stopOptions?.drainTimeoutMs;
      stopping ??= process_.stop();
      return stopping;
    },
  };
}
