// A commit-first re-run after its worker died (attempt > 1, the rows held by an earlier run): one of
// them may be what kills workers (a code handler that crashes the process). Unless the earlier run
// committed in the target (its marker says so; the run then records it), the held rows go to two
// new shards, half each (split_pinned.sql, as on the same-database path: ../isolate.ts), so a
// killer ends alone in a one-row shard that the reaper abandons, and its shard mates are applied.
import type pg from 'pg';
import type { Logger } from 'pino';
import { deleteMarker, fenceForSplit } from '../business-db.js';
import { describeError } from '../failures.js';
import type { ExternalTarget } from '../handlers.js';
import { splitPinned } from '../isolate.js';
import type { Lease } from '../lease.js';
import { targetDatabase, UNROUTABLE, type Claimed } from './claim.js';
import type { ExternalContext, ExternalOutcome } from './context.js';

/** Whether the claimed rows may hold a row that kills workers: held by an earlier run of the shard
 *  that did not finish, and more than one to split. */
export function mayHoldKiller(lease: Lease, claimed: Claimed): boolean {
  return !claimed.fresh && lease.attempts > 1 && claimed.items.length >= 2 && claimed.target !== UNROUTABLE;
}

/**
 * Splits the held rows into two new shards. In a database the split is fenced first
 * (fenceForSplit), so no earlier run can commit there while it happens; the tombstone is deleted
 * once the split committed, as a marker is after its record. Returns undefined to run the shard as
 * usual (the earlier run committed, the target cannot be fenced now, or nothing to split).
 */
export async function splitHeld(
  ctx: ExternalContext,
  lease: Lease,
  external: ExternalTarget,
  claimed: Claimed,
  log: Logger,
): Promise<ExternalOutcome | undefined> {
  let fenced: pg.Pool | undefined;
  if (external.via !== 'http') {
    const database = targetDatabase(external, claimed.target);
    if (external.via === 'sql' && !database) return undefined;
    const where = database ? ctx.databases.pool(database) : ctx.pool;
    let fence: 'fenced' | 'committed';
    try {
      fence = await fenceForSplit(where, lease.id);
    } catch (err) {
      log.warn({ err: describeError(err) }, 'could not fence the target before isolating rows; running the shard as usual');
      return undefined;
    }
    if (fence === 'committed') return undefined;
    fenced = where;
  }
  const children = await splitPinned(ctx.pool, lease.id, lease.scan_id, lease.lease_token, lease.bucket);
  if (children.length === 0) return undefined;
  // The split is committed: the tombstone has done its job (as a run's marker after its record;
  // a crash right here leaves it behind, which is harmless: no run of this shard comes again).
  if (fenced)
    await deleteMarker(fenced, lease.id).catch((err: unknown) => log.warn({ err: describeError(err) }, 'could not delete the split tombstone (harmless)'));
  log.warn({ attempt: lease.attempts, into: children }, 'shard split in two to isolate a row that may kill workers');
  ctx.metrics.shards.inc({ store: 'center', kind: lease.kind, outcome: 'split' });
  return { status: 'done', done: 0, skipped: 0, failed: 0, retried: 0 };
}
