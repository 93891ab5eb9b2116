// A shard run's outcome, the same on both execution paths, and the one place its metrics are
// recorded.
import type { Metrics } from '../observability/metrics.js';

/** What a run wrote: timeouts applied (done), skipped (nothing to change), failed for good, and
 *  retried (back to pending). */
export interface ShardCounts {
  done: number;
  skipped: number;
  failed: number;
  retried: number;
}

export type ShardOutcome =
  | ({ status: 'done' } & ShardCounts)
  /** Not ours to run: already final, held by another worker, or the lease was lost. */
  | { status: 'not-ours'; reason: string }
  /** Flow control holds it back (kind paused or at its cap): it stays queued, unpublished, and
   *  the coordinator publishes it again when the kind may run it (hold_shard.sql). */
  | { status: 'held'; reason: string };

/** A shard's lateness in seconds; `times[i]` rows had `seconds[i]` (none: one row each). */
export interface Lateness {
  seconds: number[];
  times?: number[] | undefined;
}

/**
 * PostgreSQL's clock as epoch milliseconds, read by a statement sent in the same round trip right
 * after a shard's COMMIT (`COMMIT; ${CLOCK_AFTER_COMMIT}`): the instant tc_lateness_seconds is
 * taken at, after the commit that applied the rows, with no round trip of its own. clock_timestamp(),
 * not now() or statement_timestamp(): those are the time the message arrived, before the COMMIT ran.
 */
export const CLOCK_AFTER_COMMIT = "SELECT date_part('epoch', clock_timestamp()) * 1000 AS at_ms";

/** A lateness measured at one PostgreSQL instant (`measuredMs`, epoch ms) moved to a later one
 *  (`atMs`, e.g. CLOCK_AFTER_COMMIT's): each row is that much later. */
export function latenessAt(lateness: Lateness, measuredMs: number, atMs: number): Lateness {
  const by = (atMs - measuredMs) / 1000;
  if (!Number.isFinite(by)) throw new Error(`lateness cannot be moved from ${measuredMs} to ${atMs} (epoch ms)`);
  return { seconds: lateness.seconds.map((s) => s + by), times: lateness.times };
}

/** Counts, duration and lateness of a shard that ran to its record. Lateness is left out when the
 *  whole batch failed (nothing closed). */
export function recordOutcome(
  metrics: Metrics,
  where: { store: string; kind: string },
  counts: ShardCounts,
  durationMs: number,
  lateness: Lateness | undefined,
): void {
  metrics.timeouts.inc({ ...where, outcome: 'applied' }, counts.done);
  metrics.timeouts.inc({ ...where, outcome: 'skipped' }, counts.skipped);
  metrics.timeouts.inc({ ...where, outcome: 'failed' }, counts.failed);
  metrics.timeouts.inc({ ...where, outcome: 'retried' }, counts.retried);
  metrics.shards.inc({ ...where, outcome: 'done' });
  metrics.shardDuration.observe(where, durationMs / 1000);
  if (lateness) metrics.lateness.observeMany(where, lateness.seconds, 1, lateness.times);
}
