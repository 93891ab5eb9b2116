// The tick loop: runs the leader's tick (recover -> map -> reduce -> lag, coordinator.ts) one at a
// time. node-cron drives the safety-net tick on coordinator.schedule; the tick itself says when to
// wake earlier (the next due instant, a backpressure recheck), never sooner than
// minTickIntervalMs. A tick refused by the fence steps down, unless the refused write came from
// this coordinator's own earlier term and it still leads.
import cron, { type ScheduledTask } from 'node-cron';
import type { Logger } from 'pino';
import type { Metrics } from '../observability/metrics.js';
import { BaseService } from '../service.js';
import { isRedisFailoverError } from '../transport/redis-errors.js';
import { FencedError } from './fence.js';
import type { Leadership } from './leadership.js';

/** The longest the loop sleeps on a tick's say-so (cron's schedule still ticks meanwhile). */
export const LONGEST_SLEEP_MS = 60_000;

export interface TickLoopOptions {
  schedule: string;
  minTickIntervalMs: number;
  /** One tick; returns how long to sleep before the next one (undefined: wait for cron). */
  tick: () => Promise<number | undefined>;
  leadership: Leadership;
  metrics: Metrics;
  logger: Logger;
}

export class TickLoop extends BaseService {
  readonly name = 'tick loop';
  private task: ScheduledTask | undefined;
  private wakeTimer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private tickAgain = false;
  private active = false;
  /** Ticks failed in a row on a Redis failover (isRedisFailoverError). */
  private redisFailures = 0;

  constructor(private readonly options: TickLoopOptions) {
    super();
    if (!cron.validate(options.schedule)) {
      throw new Error(`coordinator.schedule: "${options.schedule}" is not a valid cron expression`);
    }
  }

  protected async onStart(): Promise<void> {
    this.active = true;
    const { logger } = this.options;
    this.task = cron.schedule(this.options.schedule, () => this.requestTick(), {
      name: 'timeout-center-tick',
      // node-cron reports missed ticks (a busy event loop) on the console; send them to our log.
      logger: {
        info: (m: string) => logger.debug({ source: 'node-cron' }, m),
        warn: (m: string) => logger.debug({ source: 'node-cron' }, m),
        error: (m: string | Error) => logger.warn({ source: 'node-cron', err: m }, 'node-cron error'),
        debug: () => {},
      },
    });
    this.requestTick();
  }

  /** Stops ticking; waits for the tick in progress. */
  protected async onStop(): Promise<void> {
    this.active = false;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    this.wakeTimer = undefined;
    await Promise.resolve(this.task?.destroy()).catch(() => {});
    this.task = undefined;
    await this.ticking?.catch(() => {});
  }

  /** Runs a tick now, or right after the one in progress. */
  requestTick(): void {
    if (!this.active) return;
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    this.ticking = this.runTick().finally(() => {
      this.ticking = undefined;
      if (this.tickAgain && this.active) {
        this.tickAgain = false;
        this.requestTick();
      }
    });
  }

  private async runTick(): Promise<void> {
    const started = Date.now();
    try {
      const wakeInMs = await this.options.tick();
      if (wakeInMs !== undefined && this.active) this.wakeIn(wakeInMs);
      if (this.redisFailures > 0) {
        this.options.logger.info({ failedTicks: this.redisFailures }, 'coordinator ticks again after Redis came back');
        this.redisFailures = 0;
      }
    } catch (err) {
      if (err instanceof FencedError) this.fenced(err);
      else if (isRedisFailoverError(err)) {
        // A failover's redirections and retries (the next tick gets past them): warn once, not
        // at every tick while it lasts, and not at error (nothing for a person to do).
        this.redisFailures += 1;
        const log = { err: { name: (err as Error).name, message: (err as Error).message }, ms: Date.now() - started };
        if (this.redisFailures === 1) this.options.logger.warn(log, 'coordinator tick failed on a Redis failover or restart; the next tick retries');
        else this.options.logger.debug(log, 'coordinator tick failed on Redis again');
      } else this.options.logger.error({ err, ms: Date.now() - started }, 'coordinator tick failed; the next tick retries');
    }
  }

  private fenced(err: FencedError): void {
    const { leadership, metrics, logger } = this.options;
    metrics.fenced.inc();
    if (leadership.isLeader && leadership.epoch === err.currentEpoch) {
      // A tick that began under our previous term (e.g. it hung on Redis while we lost the lock
      // and won it again) was refused: right, but no reason to give up the new term. Nothing is
      // degraded (the new term goes on; tc_fenced_writes_total counts it): info, not warn.
      logger.info(
        { epoch: err.epoch, currentEpoch: err.currentEpoch },
        `fenced: ${err.message}; that write came from this coordinator's earlier term, it still leads under epoch ${err.currentEpoch}`,
      );
    } else {
      // The fence did its job: another coordinator won the lock meanwhile (this one froze past the
      // lock's lifetime, or a Redis failover or restart lost the lock), and nothing was written
      // under the old epoch. Nothing for a person to do (tc_fenced_writes_total counts them): warn.
      logger.warn({ epoch: err.epoch, currentEpoch: err.currentEpoch, holder: err.holder }, `fenced: ${err.message}; stepping down`);
      leadership.stepDown('fenced by a newer epoch');
    }
  }

  private wakeIn(ms: number): void {
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    const delay = Math.max(this.options.minTickIntervalMs, Math.min(ms, LONGEST_SLEEP_MS));
    this.wakeTimer = setTimeout(() => this.requestTick(), delay);
  }
}
