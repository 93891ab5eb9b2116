// The worker process: reads shard messages from the channel's consumer group, runs up to
// `concurrency` shards at once through the executor, and ACKs each after its commit. It also
// takes over deliveries left by dead workers (XAUTOCLAIM) and announces itself in
// timeout_center.workers.
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { LoadedConfig } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import type { ShardChannel, ShardDelivery } from '../transport/channel.js';
import { ShardExecutor } from './executor.js';
import { resolveHandlers, type ShardHandler } from './handlers.js';

export interface WorkerDeps {
  config: LoadedConfig;
  pool: pg.Pool;
  channel: ShardChannel;
  metrics: Metrics;
  logger: Logger;
}

export class Worker {
  readonly id: string;
  private readonly kinds: string[];
  private readonly registered = new Map<string, ShardHandler>();
  private executor: ShardExecutor | undefined;
  private readonly active = new Set<Promise<void>>();
  private readonly backlog: ShardDelivery[] = [];
  private loop: Promise<void> | undefined;
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private lastReclaimAt = 0;
  private lastHeartbeatAt = 0;
  private wakeSlot: (() => void) | undefined;

  constructor(private readonly deps: WorkerDeps) {
    const cfg = deps.config.worker;
    this.id = cfg.id ?? `${hostname()}-${process.pid}`;
    this.kinds = cfg.kinds ?? Object.keys(deps.config.kinds);
  }

  /** Registers a TypeScript handler for a kind whose config says `handler: { type: code }`. */
  registerHandler(kind: string, handler: ShardHandler): this {
    if (this.executor) throw new Error('registerHandler must be called before start()');
    this.registered.set(kind, handler);
    return this;
  }

  async start(): Promise<void> {
    const { config, pool, channel, metrics, logger } = this.deps;
    const handlers = await resolveHandlers(config, this.kinds, this.registered, pool);
    this.executor = new ShardExecutor(pool, handlers, this.id, config.worker.leaseMs, metrics, logger.child({ workerId: this.id }));
    await channel.init();
    await this.heartbeat();
    logger.info({ workerId: this.id, kinds: this.kinds, concurrency: config.worker.concurrency }, 'worker started');
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const { config, channel, logger } = this.deps;
    const { concurrency, blockMs, leaseMs } = config.worker;
    while (!this.stopping) {
      try {
        if (this.active.size >= concurrency) {
          await new Promise<void>((resolve) => (this.wakeSlot = resolve));
          continue;
        }
        if (Date.now() - this.lastHeartbeatAt > 5000) await this.heartbeat();
        if (Date.now() - this.lastReclaimAt > leaseMs / 2) {
          this.lastReclaimAt = Date.now();
          const reclaimed = await channel.reclaim(this.id, leaseMs, concurrency);
          if (reclaimed.length > 0) {
            this.deps.metrics.reclaims.inc({ source: 'xautoclaim' }, reclaimed.length);
            logger.warn({ count: reclaimed.length }, 'took over shard deliveries left by a stopped worker');
            this.backlog.push(...reclaimed);
          }
        }
        if (this.backlog.length === 0) {
          const free = concurrency - this.active.size;
          this.backlog.push(...(await channel.receive(this.id, free, blockMs)));
        }
        while (this.backlog.length > 0 && this.active.size < concurrency && !this.stopping) {
          this.startShard(this.backlog.shift()!);
        }
      } catch (err) {
        if (this.stopping) break;
        logger.warn({ err }, 'reading shards failed (Redis unreachable?); retrying in 1 s');
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  private startShard(delivery: ShardDelivery): void {
    const { channel, logger, metrics } = this.deps;
    const shardId = delivery.message.shardId;
    const task = (async () => {
      try {
        const outcome = await this.executor!.run(shardId);
        if (outcome.status === 'not-ours') logger.debug({ shardId, reason: outcome.reason }, 'dropped duplicate shard delivery');
        await channel.ack([delivery]);
      } catch (err) {
        // Not acknowledged: the lease runs out and the reaper (or XAUTOCLAIM) hands it on.
        logger.error({ err, shardId }, 'shard failed; it will be retried after its lease expires');
      }
    })();
    this.active.add(task);
    metrics.workerBusy.set(this.active.size);
    void task.finally(() => {
      this.active.delete(task);
      metrics.workerBusy.set(this.active.size);
      this.wakeSlot?.();
      this.wakeSlot = undefined;
    });
  }

  private async heartbeat(): Promise<void> {
    this.lastHeartbeatAt = Date.now();
    await this.deps.pool.query(
      `INSERT INTO timeout_center.workers (worker_id, host, pid, kinds) VALUES ($1, $2, $3, $4)
       ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL, kinds = EXCLUDED.kinds`,
      [this.id, hostname(), process.pid, this.kinds],
    );
  }

  /** Number of shards running now. */
  get busy(): number {
    return this.active.size;
  }

  /**
   * Stops taking shards and waits up to drainTimeoutMs for the running ones to commit. Shards
   * still running after that are left to their lease (another worker takes them over). Idempotent.
   */
  stop(drainTimeoutMs = this.deps.config.worker.drainTimeoutMs): Promise<void> {
    this.stopped ??= this.doStop(drainTimeoutMs);
    return this.stopped;
  }

  private async doStop(drainTimeoutMs: number): Promise<void> {
    this.stopping = true;
    this.wakeSlot?.();
    const { logger, pool, channel } = this.deps;
    const drained = Promise.all([...this.active]).then(() => true);
    const timedOut = new Promise<boolean>((r) => setTimeout(() => r(false), drainTimeoutMs).unref());
    const clean = await Promise.race([drained, timedOut]);
    if (!clean) logger.warn({ running: this.active.size }, 'drain timeout: leaving running shards to their lease');
    await this.loop?.catch(() => {});
    await pool
      .query('UPDATE timeout_center.workers SET stopped_at = now(), last_seen_at = now() WHERE worker_id = $1', [this.id])
      .catch(() => {});
    if (clean && this.backlog.length === 0) await channel.removeConsumer(this.id).catch(() => {});
  }
}
