// One coordinator per store (docs/scale.md): each store is led and fenced on its own, by its own
// lock (`<prefix>:coordinator-lock:store:<store>`) and the fencing epoch in its own database, so
// every coordinator process competes for every store and a store's leader can be any of them. A
// store that is down stops only its own coordinator's ticks (its lock lapses or its epoch cannot
// be bumped; it retries), never the others'.
import type pg from 'pg';
import type { Logger } from 'pino';
import { databaseSilenceMs, type LoadedConfig } from '../config.js';
import { Alerter } from '../alerts/alerter.js';
import { Coordinator } from '../coordinator/coordinator.js';
import { Leadership } from '../coordinator/leadership.js';
import { createPool } from '../db/pool.js';
import type { Metrics } from '../observability/metrics.js';
import { service, type Service } from '../service.js';
import { leaderLockKey } from '../transport/keys.js';
import { RedisStreamsChannel } from '../transport/redis-streams.js';
import { StoreChannel } from '../transport/store-channel.js';
import { storeLayout } from './layout.js';
import { AuditOutbox } from './audit-outbox.js';
import type { LeaderBalance } from './leader-balance.js';
import { SharedControls } from './shared-controls.js';
import { StoreWatch } from './store-watch.js';
import { prepareStore } from './store-database.js';

export interface StoreCoordinatorOptions {
  config: LoadedConfig;
  metrics: Metrics;
  logger: Logger;
  coordinatorId: string;
  /** The center's database: where the flow controls are changed (shared-controls.ts). */
  centerPool: pg.Pool;
  /** Closes a pool when its store's coordinator stops (runtime.ts's bounded end). */
  endPool: (pool: pg.Pool) => Promise<void>;
  /** The stores shared between coordinator processes (leader-balance.ts). */
  balance?: LeaderBalance;
}

/** The lock of a store's leadership: a key of its own, hashed whole (any slot of a cluster). */
export const storeLockKey = (prefix: string, store: string): string => `${leaderLockKey(prefix)}:store:${store}`;

/** A service per store of the config: its pool, its channel view, its leadership, its coordinator. */
export function storeCoordinators(options: StoreCoordinatorOptions): Service[] {
  const { config, metrics, coordinatorId } = options;
  const layout = storeLayout(config.kinds);
  const storesOfKind = new Map<string, number>();
  for (const kinds of layout.values()) for (const k of kinds) storesOfKind.set(k, (storesOfKind.get(k) ?? 0) + 1);
  return [...layout].map(([store, kinds]) => {
    const logger = options.logger.child({ store });
    let stop: (() => Promise<void>) | undefined;
    return service(
      `coordinator ${store}`,
      async () => {
        const url = config.businessDatabaseUrls[store];
        if (!url) throw new Error(`store ${store}: businessDatabases.${store} has no URL`);
        const pool = createPool({
          connectionString: url,
          max: config.poolSize,
          applicationName: `timeout-center coordinator (store ${store})`,
          logger,
          silentAfterMs: databaseSilenceMs(config),
        });
        // A channel of its own underneath: the store's leader checks only its own streams for loss.
        const base = new RedisStreamsChannel({ connection: config.redisConnection, keyPrefix: config.redisKeyPrefix, logger });
        const channel = new StoreChannel(base, store);
        const leadership = new Leadership({
          redis: base.redis,
          pool,
          lockKey: storeLockKey(config.redisKeyPrefix, store),
          ttlMs: config.coordinator.lockTtlMs,
          coordinatorId,
          logger,
          mayAcquire: () => options.balance?.mayAcquire(store) ?? true,
        });
        options.balance?.register(store, leadership);
        const controls = new SharedControls(options.centerPool, pool, new Map(kinds.map((k) => [k, storesOfKind.get(k) ?? 1])), logger);
        const auditOutbox = new AuditOutbox(pool, options.centerPool, store, logger);
        const storeConfig: LoadedConfig = { ...config, kinds: Object.fromEntries(kinds.map((k) => [k, config.kinds[k]!])) };
        const coordinator = new Coordinator({
          store,
          config: storeConfig,
          pool,
          channel,
          leadership,
          metrics,
          logger,
          coordinatorId,
          prepare: async () => {
            await prepareStore(pool, store, config.kinds);
            await channel.init(kinds);
            await controls.refresh(true);
          },
          beforeTick: async () => {
            await controls.refresh();
            await auditOutbox.flush();
          },
        });
        const watch = new StoreWatch({
          store,
          url,
          pool,
          redis: base.redis,
          alertKey: `${storeLockKey(config.redisKeyPrefix, store)}:down-alerted`,
          alerter: new Alerter(config.alerts, logger, metrics, coordinatorId),
          metrics,
          logger,
          downAfterMs: config.alerts.storeDownMs,
          everyMs: 1000,
        }).service();
        await watch.start();
        await coordinator.start();
        stop = async () => {
          await coordinator.stop();
          await watch.stop();
          await channel.close();
          await options.endPool(pool);
        };
      },
      async () => {
        await stop?.();
        stop = undefined;
      },
    );
  });
}
