// The worker process: reads shard messages from the channel's consumer group, runs up to
// `concurrency` shards at once through the executor (with up to `prefetch` more read ahead), and
// ACKs each after its commit. It also takes over deliveries left by dead workers (XAUTOCLAIM) and
// announces itself in timeout_center.workers.
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { databaseSilenceMs, type LoadedConfig } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { QuietRepeats } from '../observability/quiet-repeats.js';
import type { ShardChannel, ShardDelivery } from '../transport/channel.js';
import { Alerter } from '../alerts/alerter.js';
import { CircuitBreakers } from './breakers.js';
import { BusinessDatabases } from './business-db.js';
import { ShardExecutor } from './executor.js';
import { ExternalExecutor } from './external-executor.js';
import { Housekeeping } from './housekeeping.js';
import { preparedResolver } from './prepared-resolver.js';
import { maxPreparedTransactions } from './two-phase.js';
import { noAnswer, within } from '../bounded.js';
import { handBack as handBackShards } from './lease.js';
import { BusyBackends, RELEASE_BOUND_MS, releaseRunning, type RunningIn } from './release-running.js';
import type { ShardHandler } from './handler-contract.js';
import { resolveHandlers } from './handlers.js';
import { StoreSide, StoreSides } from './store-side.js';
import { centerKinds, parseStreamName, storeLabel, storeLayout, streamName } from '../stores/layout.js';
import type { Service } from '../service.js';
import { sql } from '../db/queries.js';

export interface WorkerDeps {
  config: LoadedConfig;
  pool: pg.Pool;
  channel: ShardChannel;
  metrics: Metrics;
  logger: Logger;
}

/** The database a stream's shards run in: `center`, or the stream's store. */
const databaseOf = (stream: string): string => storeLabel(parseStreamName(stream).store);

export class Worker implements Service {
  readonly name = 'worker';
  readonly id: string;
  private readonly kinds: string[];
  private readonly registered = new Map<string, ShardHandler>();
  private executor: ShardExecutor | undefined;
  private businessDatabases: BusinessDatabases | undefined;
  private breakers: CircuitBreakers | undefined;
  private readonly active = new Set<Promise<boolean>>();
  /** ACKs sent and not yet answered: a stop waits for them. */
  private readonly acks = new Set<Promise<void>>();
  /** Read and ACK failures a Redis outage repeats: warn once per 10 s each. */
  private readonly quietReads = new QuietRepeats();
  private readonly quietAcks = new QuietRepeats();
  private readonly backlog: ShardDelivery[] = [];
  private loop: Promise<void> | undefined;
  private stopping = false;
  /** The drain ran out of time: the running shards are being rolled back and released. */
  private releasing = false;
  private starting: Promise<void> | undefined;
  private stopped: Promise<void> | undefined;
  private lastReclaimAt = 0;
  /** The lease keeper and the heartbeat in the center's database (housekeeping.ts): started
   *  before the loop, stopped after the drain. */
  private housekeeping: Housekeeping | undefined;
  /** Finishes two-phase external runs that a stopped worker left prepared (prepared-resolver.ts). */
  private resolver: Service | undefined;
  private wakeSlot: (() => void) | undefined;
  /** Shard id and store (undefined: the center) of each running task: what a drain that runs
   *  out of time rolls back and releases, each in its own database (release-running.ts). */
  private readonly activeShards = new Map<Promise<boolean>, { shardId: number; store: string | undefined }>();
  /** The center pool's connections checked out now (a store side has its own). */
  private centerBackends: BusyBackends | undefined;
  /** Running shards whose handler runs in the center's PostgreSQL (worker.databaseConcurrency). */
  private readonly activeInDatabase = new Map<string, Set<Promise<boolean>>>();
  /** Kinds whose handler runs in the center's PostgreSQL (not external). */
  private inDatabaseKinds = new Set<string>();
  /** The databases those run in (the center's, each store's): what startFromBacklog shares the
   *  slots among. */
  private databases: string[] = [];
  /** The streams this worker reads: its center kinds, and `<kind>@<store>` for each store of
   *  each kind stored beside its orders (stores/layout.ts). */
  private readonly streams: string[];
  /** The kinds it serves whose timeouts live in the center's database. */
  private readonly centerServed: string[];
  private readonly storeSides: StoreSides;

  constructor(private readonly deps: WorkerDeps) {
    const cfg = deps.config.worker;
    this.id = cfg.id ?? `${hostname()}-${process.pid}`;
    this.kinds = cfg.kinds ?? Object.keys(deps.config.kinds);
    this.centerServed = centerKinds(deps.config.kinds, this.kinds);
    const stores = storeLayout(deps.config.kinds, this.kinds);
    this.streams = [...this.centerServed, ...[...stores].flatMap(([store, kinds]) => kinds.map((k) => streamName(k, store)))];
    this.storeSides = new StoreSides((store) =>
      StoreSide.open({
        store,
        kinds: stores.get(store) ?? [],
        config: deps.config,
        registered: this.registered,
        workerId: this.id,
        metrics: deps.metrics,
        logger: deps.logger.child({ workerId: this.id }),
      }),
    );
  }

  /** Registers a TypeScript handler for a kind whose config says `handler: { type: code }`. */
  registerHandler(kind: string, handler: ShardHandler): this {
    if (this.starting) throw new Error('registerHandler must be called before start()');
    this.registered.set(kind, handler);
    return this;
  }

  /** Starts reading and running shards (idempotent). A worker runs once: after stop(), build a
   *  new one. */
  start(): Promise<void> {
    this.starting ??= this.doStart();
    return this.starting;
  }

  private async doStart(): Promise<void> {
    const { config, pool, channel, metrics, logger } = this.deps;
    const handlers = await resolveHandlers(config, this.centerServed, this.registered, pool);
    // Two-phase external runs (two-phase.ts) need prepared transactions on the center's server.
    const externalKinds = [...handlers.values()].filter((h) => h.external);
    const maxPrepared = externalKinds.length > 0 ? await maxPreparedTransactions(pool) : 0;
    const twoPhase = maxPrepared > 0;
    // Streams whose shards run in a database the worker paces (databaseConcurrency per database):
    // same-database center kinds, and every store's stream.
    this.inDatabaseKinds = new Set([
      ...[...handlers.values()].filter((h) => !h.external).map((h) => h.kind),
      ...this.streams.filter((s) => parseStreamName(s).store),
    ]);
    this.databases = [...new Set(this.streams.filter((s) => this.inDatabaseKinds.has(s)).map(databaseOf))];
    for (const h of handlers.values())
      logger.info({ kind: h.kind, form: h.form.form, reason: h.form.reason }, `kind ${h.kind}: handler runs in the ${h.form.form} form`);
    const log = logger.child({ workerId: this.id });
    this.housekeeping = new Housekeeping({
      url: config.databaseUrl,
      label: '',
      workerId: this.id,
      kinds: this.kinds,
      leaseMs: config.worker.leaseMs,
      silentAfterMs: databaseSilenceMs(config),
      goneAfterMs: config.worker.goneAfterMs,
      logger: log,
      failureMessage: 'PostgreSQL: worker heartbeat failed (timeout_center.workers not updated); retrying at the next beat',
    });
    let external: ExternalExecutor | undefined;
    if (externalKinds.length > 0) {
      const sizes = Object.fromEntries(Object.entries(config.businessDatabases).map(([name, db]) => [name, db.poolSize]));
      this.businessDatabases = new BusinessDatabases(
        config.businessDatabaseUrls,
        sizes,
        log,
        Math.max(config.worker.leaseMs, 10_000),
        databaseSilenceMs(config),
      );
      const alerter = new Alerter(config.alerts, log, metrics, this.id);
      this.breakers = new CircuitBreakers(config.breaker, pool, this.id, metrics, alerter, log);
      // The Citus layout's leases run commit first whatever the server allows (they have a bucket).
      if (twoPhase) {
        log.info(
          { maxPreparedTransactions: maxPrepared },
          'external kinds run in two phases where their handler runs in a business database (each timeout written once in the center)',
        );
        this.resolver = preparedResolver(pool, this.businessDatabases, Object.keys(config.businessDatabaseUrls), log);
      } else
        log.info(
          "external kinds run commit first: max_prepared_transactions is 0 on the center's server. Set it to at least the workers' total concurrency (a restart) for the faster two-phase runs",
        );
      external = new ExternalExecutor(pool, this.businessDatabases, this.breakers, metrics, { twoPhase });
    }
    this.executor = new ShardExecutor({
      pool,
      handlers,
      workerId: this.id,
      leaseMs: config.worker.leaseMs,
      metrics,
      logger: log,
      leaseKeeper: this.housekeeping.leaseKeeper,
      external,
    });
    await channel.init(this.streams);
    this.centerBackends = new BusyBackends(pool);
    await this.housekeeping.start();
    await this.resolver?.start();
    logger.info(
      { workerId: this.id, kinds: this.kinds, concurrency: config.worker.concurrency, databaseConcurrency: config.worker.databaseConcurrency },
      'worker started',
    );
    // Open each store's side now, without waiting: its heartbeat tells the store's leader a
    // worker serves its kinds. A store that is down is opened again at its first shard.
    for (const store of new Set(this.streams.map((s) => parseStreamName(s).store))) {
      if (store !== undefined)
        this.storeSides.get(store).catch((err: unknown) => logger.warn({ err, store }, `store ${store} not reachable yet; retrying at its first shard`));
    }
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const { config, channel, logger } = this.deps;
    const { prefetch, blockMs, leaseMs } = config.worker;
    // A worker whose kinds all run in the center's PostgreSQL never runs more than
    // databaseConcurrency shards: it reads no further ahead than that (plus prefetch), leaving the
    // rest of a flood's deliveries to other workers.
    const databases = new Set(this.streams.map(databaseOf));
    const concurrency = this.streams.every((k) => this.inDatabaseKinds.has(k))
      ? Math.min(config.worker.concurrency, config.worker.databaseConcurrency * databases.size)
      : config.worker.concurrency;
    while (!this.stopping) {
      try {
        this.startFromBacklog();
        // Up to `prefetch` deliveries wait here beside the running shards, so a slot that frees
        // starts its next shard at once instead of after a read from Redis.
        if (this.active.size + this.backlog.length >= concurrency + prefetch) {
          await new Promise<void>((resolve) => (this.wakeSlot = resolve));
          continue;
        }
        if (Date.now() - this.lastReclaimAt > leaseMs / 2) {
          this.lastReclaimAt = Date.now();
          const reclaimed = await channel.reclaim(this.id, this.streams, leaseMs, concurrency);
          if (reclaimed.length > 0) {
            this.deps.metrics.reclaims.inc({ source: 'xautoclaim' }, reclaimed.length);
            logger.warn({ count: reclaimed.length }, 'took over shard deliveries left by a stopped worker');
            this.backlog.push(...reclaimed);
            continue;
          }
        }
        const room = concurrency + prefetch - this.active.size - this.backlog.length;
        this.backlog.push(...(await channel.receive(this.id, this.streams, room, blockMs)));
      } catch (err) {
        if (this.stopping) break;
        // A failover fails a few reads: warn once per 10 s (the transport logs the outage itself,
        // naming the node: redis-outages.ts), the repeats at debug.
        this.quietReads.log(logger, 'warn', { err }, 'Redis: reading shards failed; retrying in 1 s');
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  /** Starts waiting deliveries while slots are free (also called when a shard ends, so a
   *  prefetched delivery never waits for a blocking read to return). A shard whose handler runs
   *  in a PostgreSQL database (the center's, or a store's) waits while databaseConcurrency of them
   *  run there; others pass it.
   *
   *  Fair across databases (issue 31): a worker serving several (stores) shares its slots, so that
   *  no store's shards wait behind another's. The next shard is the waiting one whose database
   *  runs the fewest (first come on a tie), and a database that runs one already takes another
   *  slot only while a slot stays free for each other database served with nothing running (at
   *  most concurrency - databaseConcurrency slots are kept so, so one database alone still gets
   *  min(databaseConcurrency, concurrency) as before). With the defaults (concurrency 4,
   *  databaseConcurrency 2) and three stores whose bursts come a few milliseconds apart, each store
   *  gets a slot at the due instant instead of two stores taking all four. */
  private startFromBacklog(): void {
    const { concurrency, databaseConcurrency } = this.deps.config.worker;
    const running = (database: string) => this.activeInDatabase.get(database)?.size ?? 0;
    const kept = (database: string) => Math.min(this.databases.filter((d) => d !== database && running(d) === 0).length, concurrency - databaseConcurrency);
    const rank = (stream: string): number | undefined => {
      if (!this.inDatabaseKinds.has(stream)) return 0;
      const database = databaseOf(stream);
      const r = running(database);
      if (r >= databaseConcurrency) return undefined;
      if (r > 0 && concurrency - this.active.size - 1 < kept(database)) return undefined;
      return r;
    };
    while (this.active.size < concurrency && !this.stopping) {
      let next = -1;
      let best = Infinity;
      this.backlog.forEach((d, i) => {
        const r = rank(d.message.kind);
        if (r !== undefined && r < best) [next, best] = [i, r];
      });
      if (next < 0) return;
      this.startShard(this.backlog.splice(next, 1)[0]!);
    }
  }

  private startShard(delivery: ShardDelivery): void {
    const { logger, metrics } = this.deps;
    const shardId = delivery.message.shardId;
    // The stream says where the shard lives: a store's shards run on that store's side.
    const { store } = parseStreamName(delivery.message.kind);
    const task = (async () => {
      try {
        const executor = store === undefined ? this.executor! : (await this.storeSides.get(store)).executor;
        const outcome = await executor.run(shardId);
        if (outcome.status === 'not-ours') logger.debug({ shardId, reason: outcome.reason }, 'dropped duplicate shard delivery');
        if (outcome.status === 'held') logger.debug({ shardId, reason: outcome.reason }, 'shard held back by flow control; it stays queued');
        return true;
      } catch (err) {
        // Not acknowledged: the lease runs out and the reaper (or XAUTOCLAIM) hands it on.
        if (this.releasing) logger.warn({ err, shardId, store }, 'shard rolled back by the drain bound');
        else logger.error({ err, shardId, store }, 'shard failed; it will be retried after its lease expires');
        return false;
      }
    })();
    this.active.add(task);
    this.activeShards.set(task, { shardId, store });
    const database = databaseOf(delivery.message.kind);
    if (this.inDatabaseKinds.has(delivery.message.kind)) {
      const running = this.activeInDatabase.get(database) ?? new Set();
      running.add(task);
      this.activeInDatabase.set(database, running);
    }
    metrics.workerBusy.set(this.active.size);
    void task.then((ran) => {
      this.active.delete(task);
      this.activeShards.delete(task);
      this.activeInDatabase.get(database)?.delete(task);
      metrics.workerBusy.set(this.active.size);
      // The slot's next shard starts before this one's ACK: the outcome is committed, and the
      // ACK's round trip to Redis need not delay the next lease.
      this.startFromBacklog();
      this.wakeSlot?.();
      this.wakeSlot = undefined;
      if (ran) this.acknowledge(delivery);
    });
  }

  /** ACKs a delivery whose shard committed (or turned out not to be this worker's). */
  private acknowledge(delivery: ShardDelivery): void {
    const ack = this.deps.channel.ack([delivery]).catch((err: unknown) => {
      // The outcome is committed; only the ACK is lost (Redis unreachable). The redelivery finds
      // the shard final and is dropped, or the entry vanished with Redis's data.
      this.quietAcks.log(
        this.deps.logger,
        'warn',
        { err, shardId: delivery.message.shardId },
        'shard committed, but its ACK failed; a redelivery will be dropped as a duplicate',
      );
    });
    this.acks.add(ack);
    void ack.finally(() => this.acks.delete(ack));
  }

  /** Number of shards running now. */
  get busy(): number {
    return this.active.size;
  }

  /**
   * Stops taking shards and waits up to drainTimeoutMs for the running ones to commit. Shards
   * still running after that are rolled back and released in their own database, the center's or
   * their store's (release-running.ts), or, where that fails, left to their lease (another worker
   * takes them over). A store that does not answer holds up neither the others nor the exit: each
   * step there is bounded. Idempotent.
   */
  stop(drainTimeoutMs = this.deps.config.worker.drainTimeoutMs): Promise<void> {
    this.stopped ??= this.doStop(drainTimeoutMs);
    return this.stopped;
  }

  /** The shards running now, by the database they run in, with this process's busy sessions
   *  there. A store whose side is not open yet has none of its shards leased by this worker. */
  private runningIn(): RunningIn[] {
    const byStore = new Map<string | undefined, number[]>();
    for (const { shardId, store } of this.activeShards.values()) byStore.set(store, [...(byStore.get(store) ?? []), shardId]);
    const { config } = this.deps;
    return [...byStore].flatMap(([store, shardIds]) => {
      const url = store === undefined ? config.databaseUrl : config.businessDatabaseUrls[store];
      const busy = store === undefined ? this.centerBackends : this.storeSides.openNow().find((side) => side.store === store)?.busy;
      return url ? [{ store: storeLabel(store), url, pids: busy?.pids ?? [], shardIds }] : [];
    });
  }

  /**
   * Deliveries read but never started (the read was in flight when the stop began) go back now,
   * not after republishAfterMs or a lease: PostgreSQL still has the shard queued (or running under
   * a dead worker's lease, which the reaper requeues), so clearing published_at lets the leader
   * republish it within a second, and the delivery is acknowledged. If PostgreSQL or Redis does
   * not answer (within RELEASE_BOUND_MS, each database on its own), they stay pending under this
   * consumer for XAUTOCLAIM and the reaper.
   */
  private async handBack(): Promise<void> {
    if (this.backlog.length === 0) return;
    const left = this.backlog.splice(0);
    // Each shard goes back in its own database: the center's, or its store's.
    const byDatabase = new Map<string, ShardDelivery[]>();
    for (const d of left) byDatabase.set(databaseOf(d.message.kind), [...(byDatabase.get(databaseOf(d.message.kind)) ?? []), d]);
    const handBackIn = async (deliveries: ShardDelivery[], shardIds: number[]) => {
      const store = parseStreamName(deliveries[0]!.message.kind).store;
      const pool = store === undefined ? this.deps.pool : (await this.storeSides.get(store)).pool;
      await handBackShards(pool, shardIds);
      await this.deps.channel.ack(deliveries);
    };
    await Promise.all(
      [...byDatabase].map(async ([database, deliveries]) => {
        const shardIds = deliveries.map((d) => d.message.shardId);
        try {
          await within(handBackIn(deliveries, shardIds), RELEASE_BOUND_MS, noAnswer(`handing back shards in ${database}`, RELEASE_BOUND_MS));
          this.deps.logger.info({ shards: shardIds, store: database }, 'handed back shards read but not started');
        } catch (err) {
          this.backlog.push(...deliveries);
          this.deps.logger.warn({ err, shards: shardIds, store: database }, 'could not hand back unstarted shards; they are recovered after republishAfterMs');
        }
      }),
    );
  }

  private async doStop(drainTimeoutMs: number): Promise<void> {
    this.stopping = true;
    // A stop that arrives while the worker starts undoes the start once it is done.
    await this.starting?.catch(() => {});
    this.wakeSlot?.();
    const { logger, pool, channel, metrics } = this.deps;
    const drained = Promise.all([...this.active]).then(() => true);
    const timedOut = new Promise<boolean>((r) => setTimeout(() => r(false), drainTimeoutMs).unref());
    const clean = await Promise.race([drained, timedOut]);
    if (!clean) {
      this.releasing = true;
      this.executor?.giveUp();
      for (const side of this.storeSides.openNow()) side.executor.giveUp();
      const running = this.runningIn();
      logger.warn(
        { running: Object.fromEntries(running.map((r) => [r.store, r.shardIds])) },
        'drain timeout: rolling back the running shards and releasing them to other workers',
      );
      await releaseRunning(running, { workerId: this.id, metrics, logger });
    }
    this.centerBackends?.detach();
    await this.resolver?.stop();
    await this.housekeeping?.stop();
    await this.loop?.catch(() => {});
    await Promise.all([...this.acks]);
    await this.handBack();
    await pool.query(sql('worker/worker_stopped', { workerId: this.id })).catch(() => {});
    if (clean && this.backlog.length === 0) await channel.removeConsumer(this.id, this.streams).catch(() => {});
    const unanswered = await this.storeSides.closeAll(this.id, RELEASE_BOUND_MS);
    if (unanswered.length > 0) logger.warn({ stores: unanswered }, 'stores that did not answer while closing: their connections are left behind');
    await this.breakers?.forget();
    await this.businessDatabases?.close();
  }
}
