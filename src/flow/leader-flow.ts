// The leading coordinator's side of flow control: each tick reads the kinds' controls (one column
// of next_due.sql, no extra round trip), exports them as gauges, and turns the rate limits into
// the budget the map may plan (RateBudget). Pause and the cap on shards are applied by
// plan_shards.sql itself and, for workers, by take_lease.sql. Business databases with a rate limit
// (sql/0009, next_due's target_controls column) get token buckets of their own, keyed by target.
import type { Metrics } from '../observability/metrics.js';
import { RateBudget } from './rate-budget.js';

/** One kind's controls as next_due.sql returns them: [paused, max_running_shards, rate_limit,
 *  has_due (rate-limited kinds only), served (a live worker serves it)]. */
export type ControlsColumn = Record<string, [boolean, number | null, number | string | null, boolean | null, boolean?]>;

/** One business database's limit as next_due.sql returns it: [rate_limit, has_due]. */
export type TargetControlsColumn = Record<string, [number | string, boolean]>;

export interface TickFlow {
  /** Per rate-limited kind: timeouts the map may plan now. */
  rateBudget: Record<string, number>;
  /** Per rate-limited business database (shards.target): timeouts the map may plan against it now. */
  targetBudget: Record<string, number>;
  /** Some kind is capped, rate-limited or unserved: a plan that gave nothing may have held work
   *  back, so the coordinator must not take "nothing planned" to mean "everything due is covered". */
  limited: boolean;
}

export class LeaderFlow {
  private readonly budget = new RateBudget();
  private readonly targetBudget = new RateBudget();
  private exported = new Set<string>();
  private exportedTargets = new Set<string>();

  constructor(private readonly metrics: Metrics) {}

  /** Called once per tick with next_due's controls column and its now(). */
  tick(controls: ControlsColumn | null, nowMs: number, targetControls: TargetControlsColumn | null = null): TickFlow {
    const rates = new Map<string, number>();
    const idle = new Set<string>();
    let limited = false;
    const seen = new Set<string>();
    for (const [kind, [paused, cap, rate, hasDue, served]] of Object.entries(controls ?? {})) {
      seen.add(kind);
      this.metrics.kindPaused.set({ kind }, paused ? 1 : 0);
      if (cap === null) this.metrics.kindMaxRunningShards.remove({ kind });
      else this.metrics.kindMaxRunningShards.set({ kind }, Number(cap));
      if (rate === null) this.metrics.kindRateLimit.remove({ kind });
      else {
        rates.set(kind, Number(rate));
        if (hasDue === false) idle.add(kind);
        this.metrics.kindRateLimit.set({ kind }, Number(rate));
      }
      // A kind no live worker serves gets one shard waiting at most (plan_shards.sql): held back.
      if (cap !== null || rate !== null || served === false) limited = true;
    }
    // A kind no longer served: no series left behind.
    for (const kind of this.exported) if (!seen.has(kind)) this.removeGauges(kind);
    this.exported = seen;
    // Business databases: only the rate-limited ones are in the column.
    const targetRates = new Map<string, number>();
    const idleTargets = new Set<string>();
    for (const [target, [rate, hasDue]] of Object.entries(targetControls ?? {})) {
      targetRates.set(target, Number(rate));
      if (!hasDue) idleTargets.add(target);
      this.metrics.targetRateLimit.set({ target }, Number(rate));
      limited = true;
    }
    for (const target of this.exportedTargets) if (!targetRates.has(target)) this.metrics.targetRateLimit.remove({ target });
    this.exportedTargets = new Set(targetRates.keys());
    return {
      rateBudget: this.budget.refill(rates, nowMs, idle),
      targetBudget: this.targetBudget.refill(targetRates, nowMs, idleTargets),
      limited,
    };
  }

  /** What a plan gave each kind (its shards' claim limits). */
  planned(byKind: ReadonlyMap<string, { planned: number }>, byTarget: ReadonlyMap<string, number> = new Map()): void {
    this.budget.spend(new Map([...byKind].map(([kind, k]) => [kind, k.planned])));
    this.targetBudget.spend(byTarget);
  }

  /** Leadership gained or lost: buckets start empty, gauges are the leader's only. */
  reset(): void {
    this.budget.clear();
    this.targetBudget.clear();
    for (const kind of this.exported) this.removeGauges(kind);
    this.exported = new Set();
    for (const target of this.exportedTargets) this.metrics.targetRateLimit.remove({ target });
    this.exportedTargets = new Set();
  }

  private removeGauges(kind: string): void {
    this.metrics.kindPaused.remove({ kind });
    this.metrics.kindMaxRunningShards.remove({ kind });
    this.metrics.kindRateLimit.remove({ kind });
  }
}
