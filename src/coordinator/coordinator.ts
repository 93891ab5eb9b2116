// The coordinator: leadership (a Redis lock for liveness, a fencing epoch in PostgreSQL for
// safety), and the duties that run only while it leads, started on each election and stopped on
// each deposition: the tick loop, retention and the vacuum horizon watch (horizon-watch.ts). Each
// leader tick runs, in this order:
//   1. recover (recovery.ts): republish what Redis lost or a dead worker left behind, first, so a
//      new leader or a Redis loss costs no more than one tick;
//   2. map (mapper.ts): write shards for what is due beyond the shards in flight, and publish them;
//   3. reduce (reducer.ts): close finished scans and raise their alerts; after the map, so a tick
//      woken by a due instant plans it first (the reduce is a fenced transaction of its own, and a
//      scan mapped now has nothing to reduce yet);
//   4. lag (lag-monitor.ts): backlog and lag gauges, and the lag SLA alert.
// All times it compares come from PostgreSQL's now().
import type pg from 'pg';
import type { Logger } from 'pino';
import { Alerter } from '../alerts/alerter.js';
import type { LoadedConfig } from '../config.js';
import { LeaderFlow } from '../flow/leader-flow.js';
import type { Metrics } from '../observability/metrics.js';
import { Retention } from '../retention/retention.js';
import { BaseService, ServiceGroup } from '../service.js';
import { storeLabel } from '../stores/layout.js';
import type { ShardChannel } from '../transport/channel.js';
import { Dispatcher } from './dispatch.js';
import { HorizonWatch } from './horizon-watch.js';
import { LagMonitor } from './lag-monitor.js';
import { LeaderGated } from './leader-gated.js';
import type { Leadership } from './leadership.js';
import { Mapper } from './mapper.js';
import { Recovery } from './recovery.js';
import { Reducer } from './reducer.js';
import { TickLoop } from './tick-loop.js';
import { withSpan } from '../observability/tracing.js';
import { horizonLimits } from '../operations/vacuum-horizon.js';
import { UnservedKinds } from './unserved-kinds.js';
import { ClaimFloors } from './claim-floors.js';
import { Reindexer } from '../retention/reindexer.js';

export interface CoordinatorDeps {
  config: LoadedConfig;
  pool: pg.Pool;
  channel: ShardChannel;
  leadership: Leadership;
  metrics: Metrics;
  logger: Logger;
  coordinatorId: string;
  /** The store this coordinator leads (undefined: the center's database). */
  store?: string;
  /** Runs before the first tick of each term, until it succeeds (a store's database is checked
   *  and given the config's kinds: stores/store-database.ts). */
  prepare?: () => Promise<void>;
  /** Runs before every tick (a store's leader copies its share of the center's flow controls). */
  beforeTick?: () => Promise<void>;
  /** More databases whose vacuum horizon this leader watches besides its own (the center's
   *  leader: each business database that is not a store; horizon-watch.ts). */
  horizonDatabases?: { name: string; url: string }[];
}

export class Coordinator extends BaseService {
  readonly name: string;
  /** False until `prepare` succeeded in this term. */
  private prepared = false;
  private readonly flow: LeaderFlow;
  private readonly recovery: Recovery;
  private readonly mapper: Mapper;
  private readonly reducer: Reducer;
  private readonly lag: LagMonitor;
  private readonly loop: TickLoop;
  private readonly duties: LeaderGated;

  constructor(private readonly deps: CoordinatorDeps) {
    super();
    const store = storeLabel(deps.store);
    this.name = deps.store === undefined ? 'coordinator' : `coordinator ${deps.store}`;
    const { config, pool, channel, leadership, metrics, logger } = deps;
    const alerter = new Alerter(config.alerts, logger, metrics, deps.coordinatorId);
    this.flow = new LeaderFlow(metrics);
    const dispatcher = new Dispatcher(channel, this.flow, metrics, logger);
    // Standby until elected: the store's series exist from the start.
    metrics.leader.set({ store }, 0);
    metrics.epoch.set({ store }, 0);
    // Per kind, where the map's counts, the lag check and the shards' claims read the due index from.
    const floors = new ClaimFloors();
    this.lag = new LagMonitor(pool, alerter, metrics, config.alerts, config.coordinator.lagCheckIntervalMs, store, floors);
    this.recovery = new Recovery({
      pool,
      channel,
      dispatcher,
      alerter,
      metrics,
      logger,
      republishAfterMs: config.coordinator.republishAfterMs,
      goneAfterMs: config.worker.goneAfterMs,
      kinds: Object.keys(config.kinds),
      floors,
    });
    const unserved = new UnservedKinds(alerter, logger);
    this.mapper = new Mapper({
      config,
      pool,
      flow: this.flow,
      dispatcher,
      lag: this.lag,
      unserved,
      metrics,
      logger,
      coordinatorId: deps.coordinatorId,
      store,
      floors,
    });
    this.reducer = new Reducer({ pool, alerter, metrics, logger, consecutiveFailed: config.alerts.consecutiveFailedScans, floors });
    this.loop = new TickLoop({
      schedule: config.coordinator.schedule,
      minTickIntervalMs: config.coordinator.minTickIntervalMs,
      tick: () => this.tick(),
      leadership,
      metrics,
      logger,
    });
    const retention = new Retention({ pool, config: config.retention, logger, metrics });
    const horizon = new HorizonWatch({
      databases: [{ name: store, pool }, ...(deps.horizonDatabases ?? [])],
      metrics,
      alerter,
      logger,
      limits: horizonLimits(config.alerts),
      everyMs: config.coordinator.horizonCheckIntervalMs,
    });
    const reindexer = new Reindexer({ pool, logger });
    this.duties = new LeaderGated({
      leadership,
      logger,
      group: new ServiceGroup('leader duties', [this.loop, retention, horizon, reindexer], logger),
      onElected: (epoch) => {
        this.prepared = false;
        metrics.leader.set({ store }, 1);
        metrics.epoch.set({ store }, epoch);
        // A new term starts from nothing: the previous leader's shards may cover anything.
        this.recovery.reset();
        this.mapper.memory.reset();
        unserved.reset();
        this.flow.reset();
      },
      onDeposed: () => {
        this.mapper.memory.reset();
        unserved.reset();
        this.flow.reset();
        metrics.leader.set({ store }, 0);
        metrics.epoch.set({ store }, 0);
        this.lag.clearGauges();
      },
    });
  }

  get isLeader(): boolean {
    return this.deps.leadership.isLeader;
  }

  /** Runs a leader tick now, or right after the one in progress (no-op off the lead). */
  requestTick(): void {
    this.loop.requestTick();
  }

  /** One tick: recover -> map -> reduce -> lag. Returns how long to sleep before the next one
   *  (undefined: wait for cron). Off the lead, does nothing. */
  async tick(): Promise<number | undefined> {
    const { leadership } = this.deps;
    if (!leadership.isLeader) return undefined;
    const epoch = leadership.epoch;
    if (!this.prepared && this.deps.prepare) {
      await this.deps.prepare();
      this.prepared = true;
    }
    await this.deps.beforeTick?.();
    // One span per leader tick, one child per step (docs/tracing.md); the map's holds its scan.
    return withSpan('tc.tick', { 'tc.epoch': epoch }, async () => {
      await withSpan('tc.recover', {}, () => this.recovery.recover(epoch));
      const wakeInMs = await withSpan('tc.map', {}, () => this.mapper.map(epoch));
      await withSpan('tc.reduce', {}, () => this.reducer.reduce(epoch));
      await withSpan('tc.lag', {}, () => this.lag.check());
      return wakeInMs;
    });
  }

  protected async onStart(): Promise<void> {
    await this.duties.start();
    await this.deps.leadership.start();
  }

  /** Stops the leader duties (after the tick in progress) and gives up leadership: the lock is
   *  released for a standby. */
  protected async onStop(): Promise<void> {
    await this.duties.stop();
    await this.deps.leadership.stop();
  }
}
