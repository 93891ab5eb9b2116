// Who leads. Liveness comes from a Redis lock (redlock, renewed every third of its lifetime; the
// embedded single-process mode uses a local lock instead, leader-lock.ts);
// safety comes from the fencing epoch in PostgreSQL: winning the lock bumps the epoch, and every
// coordinator write runs in a transaction that checks it (fence.ts). A coordinator that was
// paused past its lock, or lost it to a Redis restart, cannot write once another has won.
import { EventEmitter } from 'node:events';
import type { Cluster, Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Service } from '../service.js';
import { redlockLeaderLock, type HeldLock, type LeaderLock } from './leader-lock.js';
import { sql } from '../db/queries.js';
import { within } from '../bounded.js';

export interface LeadershipOptions {
  /** Redis for the default redlock lock; ignored when `lock` is given. */
  redis?: Redis | Cluster;
  /** The liveness lock; default redlock on `redis`. The embedded mode passes a LocalLeaderLock. */
  lock?: LeaderLock;
  pool: pg.Pool;
  lockKey: string;
  ttlMs: number;
  coordinatorId: string;
  logger: Logger;
  /** False while this process should not take the lock (stores/leader-balance.ts: a store it just
   *  handed over to another coordinator). */
  mayAcquire?: () => boolean;
}

export interface LeadershipEvents {
  elected: [epoch: number];
  deposed: [reason: string];
}

export class Leadership extends EventEmitter<LeadershipEvents> implements Service {
  readonly name = 'leadership';
  private readonly locker: LeaderLock;
  private lock: HeldLock | undefined;
  private currentEpoch = 0;
  private timer: NodeJS.Timeout | undefined;
  private busy: Promise<void> = Promise.resolve();
  private stopped = true;

  constructor(private readonly options: LeadershipOptions) {
    super();
    if (options.lock) this.locker = options.lock;
    else if (options.redis) this.locker = redlockLeaderLock(options.redis);
    else throw new Error('Leadership needs a lock or a Redis connection');
  }

  /** True while this process holds an unexpired lock and an epoch. */
  get isLeader(): boolean {
    return this.lock !== undefined && this.lock.expiration > Date.now() && this.currentEpoch > 0;
  }

  get epoch(): number {
    return this.isLeader ? this.currentEpoch : 0;
  }

  /** Starts competing for the lock (idempotent: a second start while running does nothing). */
  async start(): Promise<void> {
    if (!this.stopped) return;
    await this.busy.catch(() => {});
    this.stopped = false;
    this.schedule(0);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.busy = this.step().finally(() => this.schedule(Math.max(100, Math.floor(this.options.ttlMs / 3))));
    }, delayMs);
  }

  private async step(): Promise<void> {
    try {
      if (this.lock) await this.renew();
      else await this.tryAcquire();
    } catch (err) {
      this.options.logger.warn({ err }, 'leadership step failed; will retry');
    }
  }

  private async tryAcquire(): Promise<void> {
    if (this.options.mayAcquire && !this.options.mayAcquire()) return;
    let lock: HeldLock;
    const acquiring = this.locker.acquire(this.options.lockKey, this.options.ttlMs);
    try {
      lock = await within(acquiring, this.options.ttlMs, silentRedis('acquiring the leadership lock', this.options.ttlMs));
    } catch {
      // Another coordinator leads, or Redis is unreachable or silent: stay standby. A lock won
      // after we stopped waiting is given back (it would expire on its own anyway).
      acquiring.then((late) => late.release()).catch(() => {});
      return;
    }
    if (lock.expiration <= Date.now()) {
      await lock.release().catch(() => {});
      return;
    }
    try {
      const { rows } = await this.options.pool.query<{ epoch: number }>(sql('coordinator/bump_epoch', { coordinatorId: this.options.coordinatorId }));
      const epoch = rows[0]?.epoch;
      if (!epoch) throw new Error('timeout_center.coordinator_lease has no row: run `timeout-center migrate`');
      this.lock = lock;
      this.currentEpoch = epoch;
      this.options.logger.info({ epoch }, 'became leader');
      this.emit('elected', epoch);
    } catch (err) {
      await lock.release().catch(() => {});
      throw err;
    }
  }

  private async renew(): Promise<void> {
    const lock = this.lock!;
    if (lock.expiration <= Date.now()) {
      this.stepDown('lock expired before it could be renewed (process paused or Redis unreachable)');
      return;
    }
    try {
      // Not past the lock's own expiry: a renewal that never answers must not keep this loop
      // waiting while the lock runs out (the leader would neither lead nor step down).
      const left = lock.expiration - Date.now();
      this.lock = await within(lock.extend(this.options.ttlMs), left, silentRedis('renewing the leadership lock', left));
    } catch (err) {
      this.stepDown(`could not renew the leadership lock: ${(err as Error).message}`);
    }
  }

  /** Stops acting as leader now; the lock is released if it is still ours. */
  stepDown(reason: string): void {
    const lock = this.lock;
    if (!lock) return;
    const epoch = this.currentEpoch;
    this.lock = undefined;
    this.currentEpoch = 0;
    this.options.logger.warn({ epoch, reason }, 'stepped down as leader');
    lock.release().catch(() => {});
    this.emit('deposed', reason);
  }

  /** Stops competing and releases the lock if held (idempotent). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.busy.catch(() => {});
    const lock = this.lock;
    this.lock = undefined;
    this.currentEpoch = 0;
    if (lock) await lock.release().catch(() => {});
  }
}

/** A lock command's bound (its lock's lifetime) ran out: Redis is silent. */
function silentRedis(what: string, ms: number): string {
  return `${what} got no answer from Redis within ${Math.max(0, Math.round(ms))} ms`;
}
