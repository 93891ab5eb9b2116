// Token buckets, one per rate-limited kind (or, in a second instance, per rate-limited business
// database: the keys are then targets; src/flow/leader-flow.ts), kept by the leading coordinator. Only the leader plans
// shards, and each shard's claim limit is taken from its kind's bucket when it is planned
// (coordinator/queries/plan_shards.sql), so the limit holds across the whole fleet whatever the
// number of workers. Time is the database clock (next_due's now()), never this node's.
//
// A bucket refills at the kind's rate and holds at most BURST_SECONDS worth (at least one
// timeout), so a late tick loses nothing but a long pause in ticking does not turn into a burst.
// While a kind has nothing due (next_due.sql says so each tick), and at the first tick it has
// again, its bucket holds one shard's worth at most, so work arriving after a quiet spell starts
// at the rate, not with a burst saved up meanwhile. A new bucket (new leader, a limit just set) starts empty: a failover never adds
// a burst to what the old leader planned.
// plan_shards.sql spends whole shards of a tenth of a second's worth and keeps at most one
// second's worth in flight, so the commits follow the plans closely.

/** Largest budget a bucket holds, in seconds of its rate. */
export const BURST_SECONDS = 0.5;

/** A rate-limited kind's shard: a tenth of a second's worth (plan_shards.sql computes the same,
 *  also capped by the kind's shard size). */
export function rateShardSize(rate: number): number {
  return Math.max(1, Math.ceil(rate * 0.1));
}

interface Bucket {
  rate: number;
  tokens: number;
  /** Nothing was due at the last refill. */
  idle: boolean;
  /** Database clock (ms) of the last refill. */
  at: number;
}

export class RateBudget {
  private readonly buckets = new Map<string, Bucket>();

  /**
   * Refills the bucket of every rate-limited kind up to nowMs at its current rate (a changed rate
   * applies from now on; a lowered one also clips what the bucket holds) and forgets kinds no
   * longer limited. A kind in `idle` (nothing due) keeps at most one shard's worth. Returns the
   * whole timeouts each kind may be given now.
   */
  refill(rates: ReadonlyMap<string, number>, nowMs: number, idle: ReadonlySet<string> = new Set()): Record<string, number> {
    for (const kind of this.buckets.keys()) if (!rates.has(kind)) this.buckets.delete(kind);
    const budget: Record<string, number> = {};
    for (const [kind, rate] of rates) {
      if (!(rate > 0) || !Number.isFinite(rate)) continue;
      const burst = Math.max(rate * BURST_SECONDS, 1);
      const b = this.buckets.get(kind);
      if (!b) {
        this.buckets.set(kind, { rate, tokens: 0, at: nowMs, idle: idle.has(kind) });
        budget[kind] = 0;
        continue;
      }
      const elapsed = Math.max(0, nowMs - b.at) / 1000;
      // Refill at the rate in force until now (the change was read this tick).
      const quiet = b.idle || idle.has(kind);
      b.tokens = Math.min(quiet ? Math.min(burst, rateShardSize(rate)) : burst, b.tokens + b.rate * elapsed);
      b.idle = idle.has(kind);
      b.rate = rate;
      b.at = Math.max(b.at, nowMs);
      budget[kind] = Math.floor(b.tokens);
    }
    return budget;
  }

  /** Takes from each kind's bucket what the plan gave it. */
  spend(planned: ReadonlyMap<string, number>): void {
    for (const [kind, n] of planned) {
      const b = this.buckets.get(kind);
      if (b) b.tokens = Math.max(0, b.tokens - n);
    }
  }

  /** Forgets every bucket (leadership gained or lost). */
  clear(): void {
    this.buckets.clear();
  }
}
