// Token buckets, one per rate-limited kind, kept by the leading coordinator. Only the leader plans
// shards, and each shard's claim limit is taken from its kind's bucket when it is planned
// (coordinator/queries/plan_shards.sql), so the limit holds across the whole fleet whatever the
// number of workers. Time is the database clock (next_due's now()), never this node's.
//
// A bucket refills at the kind's rate and holds at most BURST_SECONDS worth (at least one
// timeout), so a late tick loses nothing but a long pause in ticking does not turn into a burst.
// A kind that got nothing although its budget allowed a shard has nothing due (or one second's
// worth in flight already): its bucket fills to one shard's worth only until a plan gives it
// something again, so work arriving after a quiet spell starts at the rate, not with a saved-up
// burst. A new bucket (new leader, a limit just set) starts empty: a failover never adds
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
  /** The last plan gave nothing although a shard's worth was offered. */
  idle: boolean;
  /** Whole tokens offered to the last plan. */
  offered: number;
  /** Database clock (ms) of the last refill. */
  at: number;
}

export class RateBudget {
  private readonly buckets = new Map<string, Bucket>();

  /**
   * Refills the bucket of every rate-limited kind up to nowMs at its current rate (a changed rate
   * applies from now on; a lowered one also clips what the bucket holds) and forgets kinds no
   * longer limited. Returns the whole timeouts each kind may be given now.
   */
  refill(rates: ReadonlyMap<string, number>, nowMs: number): Record<string, number> {
    for (const kind of this.buckets.keys()) if (!rates.has(kind)) this.buckets.delete(kind);
    const budget: Record<string, number> = {};
    for (const [kind, rate] of rates) {
      if (!(rate > 0) || !Number.isFinite(rate)) continue;
      const burst = Math.max(rate * BURST_SECONDS, 1);
      const b = this.buckets.get(kind);
      if (!b) {
        this.buckets.set(kind, { rate, tokens: 0, at: nowMs, idle: false, offered: 0 });
        budget[kind] = 0;
        continue;
      }
      const elapsed = Math.max(0, nowMs - b.at) / 1000;
      // Refill at the rate in force until now (the change was read this tick).
      b.tokens = Math.min(b.idle ? rateShardSize(rate) : burst, b.tokens + b.rate * elapsed);
      b.rate = rate;
      b.at = Math.max(b.at, nowMs);
      b.offered = Math.floor(b.tokens);
      budget[kind] = b.offered;
    }
    return budget;
  }

  /** After each tick: takes from each kind's bucket what the plan gave it (nothing when there
   *  was no plan); a kind given nothing keeps at most one shard's worth (see above). */
  settle(planned: ReadonlyMap<string, number>): void {
    for (const [kind, b] of this.buckets) {
      const n = planned.get(kind) ?? 0;
      if (n > 0) {
        b.tokens = Math.max(0, b.tokens - n);
        b.idle = false;
      } else if (b.offered >= rateShardSize(b.rate)) {
        b.tokens = Math.min(b.tokens, rateShardSize(b.rate));
        b.idle = true;
      }
    }
  }

  /** Forgets every bucket (leadership gained or lost). */
  clear(): void {
    this.buckets.clear();
  }
}
