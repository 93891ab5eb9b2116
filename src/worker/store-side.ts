// A worker's side of one store (docs/scale.md): the kinds stored beside their orders in that
// database run there on the same-database path (claim, handler and completion in one statement),
// with the store's own pools, lease keeper and heartbeat (the store's leader counts only the
// workers it sees in its own timeout_center.workers). Opened at a store's first shard, not at
// start: a store that is down must not keep a worker from serving the others.
import type pg from 'pg';
import type { Logger } from 'pino';
import { databaseSilenceMs, type LoadedConfig } from '../config.js';
import { createPool } from '../db/pool.js';
import { sql } from '../db/queries.js';
import type { Metrics } from '../observability/metrics.js';
import { ShardExecutor } from './executor.js';
import type { ShardHandler } from './handler-contract.js';
import { resolveHandlers } from './handlers.js';
import { Housekeeping } from './housekeeping.js';
import { noAnswer, within } from '../bounded.js';
import { BusyBackends } from './release-running.js';

export interface StoreSideOptions {
  store: string;
  /** The beside kinds of this store the worker serves. */
  kinds: string[];
  config: LoadedConfig;
  registered: Map<string, ShardHandler>;
  workerId: string;
  metrics: Metrics;
  logger: Logger;
}

export class StoreSide {
  private constructor(
    readonly store: string,
    readonly pool: pg.Pool,
    readonly executor: ShardExecutor,
    private readonly housekeeping: Housekeeping,
    /** The pool's connections checked out now: the sessions a drain past its bound ends. */
    readonly busy: BusyBackends,
  ) {}

  static async open(o: StoreSideOptions): Promise<StoreSide> {
    const url = o.config.businessDatabaseUrls[o.store];
    if (!url) throw new Error(`store ${o.store}: businessDatabases.${o.store} has no URL`);
    const logger = o.logger.child({ store: o.store });
    const pool = createPool({
      connectionString: url,
      max: o.config.worker.concurrency,
      applicationName: `timeout-center worker (store ${o.store})`,
      logger,
      idleInTransactionTimeoutMs: Math.max(o.config.worker.leaseMs, 10_000),
      silentAfterMs: databaseSilenceMs(o.config),
    });
    const housekeeping = new Housekeeping({
      url,
      label: ` (store ${o.store})`,
      workerId: o.workerId,
      kinds: o.kinds,
      leaseMs: o.config.worker.leaseMs,
      silentAfterMs: databaseSilenceMs(o.config),
      goneAfterMs: o.config.worker.goneAfterMs,
      logger,
      failureMessage: `PostgreSQL: worker heartbeat in store ${o.store} failed; retrying at the next beat`,
    });
    try {
      // In its store a beside kind's handler runs where its timeouts are: the same-database path.
      const kinds = Object.fromEntries(
        o.kinds.map((k) => {
          const kc = o.config.kinds[k]!;
          return [k, { ...kc, handler: kc.handler.type === 'sql' ? { ...kc.handler, database: undefined, route: undefined } : kc.handler }];
        }),
      );
      const handlers = await resolveHandlers({ ...o.config, kinds }, o.kinds, o.registered, pool);
      const executor = new ShardExecutor({
        pool,
        handlers,
        workerId: o.workerId,
        leaseMs: o.config.worker.leaseMs,
        metrics: o.metrics,
        logger,
        leaseKeeper: housekeeping.leaseKeeper,
        store: o.store,
      });
      await housekeeping.start();
      logger.info({ kinds: o.kinds }, `worker serves store ${o.store}`);
      return new StoreSide(o.store, pool, executor, housekeeping, new BusyBackends(pool));
    } catch (err) {
      await pool.end().catch(() => {});
      await housekeeping.stop();
      throw err;
    }
  }

  /** Stops renewals and the heartbeat (after the drain), says this worker stopped, closes pools. */
  async close(workerId: string): Promise<void> {
    this.busy.detach();
    await this.housekeeping.stop();
    await this.pool.query(sql('worker/worker_stopped', { workerId })).catch(() => {});
    await this.pool.end().catch(() => {});
  }
}

/** The worker's store sides, opened at each store's first shard; a store that cannot be opened
 *  (down, not migrated) is tried again at its next shard. */
export class StoreSides {
  private readonly opened = new Map<string, Promise<StoreSide>>();
  /** The sides whose opening completed. */
  private readonly ready = new Map<string, StoreSide>();

  constructor(private readonly open: (store: string) => Promise<StoreSide>) {}

  get(store: string): Promise<StoreSide> {
    let side = this.opened.get(store);
    if (!side) {
      const opening = this.open(store);
      side = opening;
      this.opened.set(store, side);
      side.then(
        (s) => this.opened.get(store) === opening && this.ready.set(store, s),
        () => this.opened.get(store) === opening && this.opened.delete(store),
      );
    }
    return side;
  }

  /** The sides open now (no wait for one still opening). */
  openNow(): StoreSide[] {
    return [...this.ready.values()];
  }

  /** Closes every side (one still opening once it opens), each within boundMs: a store that
   *  does not answer is left with its connections. Returns the stores left so. */
  async closeAll(workerId: string, boundMs: number): Promise<string[]> {
    const sides = [...this.opened];
    this.opened.clear();
    this.ready.clear();
    const left = await Promise.all(
      sides.map(([store, side]) =>
        within(
          side.then(
            (s) => s.close(workerId),
            () => {},
          ),
          boundMs,
          noAnswer(`closing store ${store}`, boundMs),
        ).then(
          () => [],
          () => [store],
        ),
      ),
    );
    return left.flat();
  }
}
