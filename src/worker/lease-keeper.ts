// Renews the lease of each running shard while it runs (as BullMQ's lock manager does), so only a
// dead or hung worker loses its shard: every third of the lease, one UPDATE per running shard on a
// connection pool of the keeper's own (a worker whose slots all wait on PostgreSQL still renews).
// Keyed by lease token: a renewal that finds no row means the lease is lost (requeued by the
// reaper), and the executor then refuses to commit (lock_shard.sql refuses it too).
import type pg from 'pg';
import type { Logger } from 'pino';
import { sql } from '../db/queries.js';
import type { Service } from '../service.js';

export interface KeptLease {
  /** True once a renewal found the lease gone. */
  readonly lost: boolean;
  /** Stops renewing (the shard ended). */
  stop(): void;
}

export class LeaseKeeper implements Service {
  readonly name = 'lease-keeper';
  private readonly running = new Map<number, { token: string; lost: boolean }>();
  private timer: NodeJS.Timeout | undefined;
  /** The renewal round in progress, if any: stop() waits for it. */
  private renewing: Promise<void> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly leaseMs: number,
    private readonly logger: Logger,
  ) {}

  /** Renews the shard's lease until stop() is called. */
  keep(shardId: number, token: string): KeptLease {
    const entry = { token, lost: false };
    this.running.set(shardId, entry);
    this.timer ??= setInterval(() => void this.renewAll(), Math.max(100, Math.floor(this.leaseMs / 3)));
    return {
      get lost() {
        return entry.lost;
      },
      stop: () => {
        if (this.running.get(shardId) === entry) this.running.delete(shardId);
        if (this.running.size === 0 && this.timer) {
          clearInterval(this.timer);
          this.timer = undefined;
        }
      },
    };
  }

  private renewAll(): Promise<void> {
    // The previous round is still out (PostgreSQL slow): skip one.
    this.renewing ??= this.renewRound().finally(() => (this.renewing = undefined));
    return this.renewing;
  }

  private async renewRound(): Promise<void> {
    for (const [shardId, entry] of [...this.running]) {
      if (entry.lost) continue;
      try {
        const { rows } = await this.pool.query<{ renewed: number; held: boolean }>(
          sql('worker/renew_lease', { shardId, leaseToken: entry.token, leaseMs: this.leaseMs }),
        );
        // Still ours to judge only if the shard is still running here (it may have just ended).
        if (rows[0]?.held === false && this.running.get(shardId) === entry) {
          entry.lost = true;
          this.logger.warn({ shardId }, 'lease renewal found the lease lost (the shard was requeued); this run will not commit');
        }
      } catch (err) {
        // Not lost, only not renewed this time: the next round tries again well before expiry.
        this.logger.warn({ err, shardId }, 'PostgreSQL: lease renewal failed; retrying at the next renewal');
      }
    }
  }

  /** Nothing to start: renewals begin with the first keep(). */
  async start(): Promise<void> {}

  /** Stops renewing every lease (the worker is stopping) and waits for the round in progress. */
  async stop(): Promise<void> {
    this.running.clear();
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.renewing;
  }
}
