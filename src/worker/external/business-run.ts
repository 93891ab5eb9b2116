// Step 2 of an external run, the part both protocols share: the handler in the target's own
// transaction. A connection to the target (connectTarget), the circuit breaker and span around the
// call (underBreaker), the handler on the whole batch with row-level failures isolated in
// savepoints (applyHandler), and the cleanup of a transaction that failed (abandon). What each
// protocol does around the handler (the marker, the fence, the commit) is in
// commit-first-apply.ts and two-phase-run.ts.
import type pg from 'pg';
import { isConnectionError } from '../../db/pool.js';
import { failpoint } from '../../failpoints.js';
import { withSpan } from '../../observability/tracing.js';
import { applyIsolating } from '../batch-isolation.js';
import type { CircuitBreakers } from '../breakers.js';
import type { Marker } from '../business-db.js';
import { describeError, isBatchLevel } from '../failures.js';
import { BatchFailure, type ShardItem } from '../handler-contract.js';
import type { ResolvedHandler } from '../handlers.js';
import type { Lease } from '../lease.js';

/** How long past the kind's time limit a run's handler may take before its connection is
 *  destroyed (time-limit.ts). */
export const TIME_LIMIT_GRACE_MS = 250;

/** A connection to the target database for a run's transaction, and its release, which acts once
 *  (the time limit may destroy the connection while the run still holds it). */
export interface TargetConnection {
  client: pg.PoolClient;
  release: (destroy: Error | boolean) => void;
  released: () => boolean;
}

/** A connection to the target database; one that cannot be had is a batch-level failure. */
export async function connectTarget(where: pg.Pool): Promise<TargetConnection> {
  let client: pg.PoolClient;
  try {
    client = await where.connect();
  } catch (err) {
    throw new BatchFailure(`cannot connect to the target database: ${describeError(err)}`, undefined, { cause: err });
  }
  let released = false;
  return {
    client,
    release: (destroy) => {
      if (released) return;
      released = true;
      client.release(destroy);
    },
    released: () => released,
  };
}

/** The handler's call behind the kind's circuit breaker for this target, in its span (tc.handler).
 *  While the breaker is open cockatiel refuses the call (BrokenCircuitError) without running it;
 *  after halfOpenAfterMs it lets one trial call through. */
export function underBreaker<T>(breakers: CircuitBreakers, lease: Lease, target: string, items: number, call: () => Promise<T>): Promise<T> {
  return breakers.execute(lease.kind, target, () => withSpan('tc.handler', { 'tc.kind': lease.kind, 'tc.target': target, 'tc.handler.items': items }, call));
}

/** The handler on the claimed rows in the run's open transaction, split in savepoints to isolate
 *  the rows that fail (batch-isolation.ts); a batch-level failure or the aborted signal ends it. */
export async function applyHandler(
  client: pg.PoolClient,
  lease: Lease,
  handler: ResolvedHandler,
  items: ShardItem[],
  signal: AbortSignal,
): Promise<Pick<Marker, 'applied' | 'failed'>> {
  const call = (batch: ShardItem[]) => {
    if (signal.aborted) throw signal.reason;
    return handler.run(batch, { kind: handler.kind, shardId: lease.id, attempt: lease.attempts, client, signal });
  };
  const { applied, failed, whole } = await applyIsolating(client, items, call, (err) => isBatchLevel(err) || signal.aborted);
  await failpoint('external.after-apply');
  return { applied: whole ?? [...applied], failed: [...failed].map(([bizId, f]) => ({ bizId, ...f })) };
}

/** A run's transaction in the target that failed with `err`: rolled back while the connection
 *  serves, destroyed when it broke (or the rollback fails). */
export async function abandon(target: TargetConnection, err: unknown): Promise<void> {
  const broken = isConnectionError(err);
  if (!broken && !target.released()) await target.client.query('ROLLBACK').catch(() => target.release(true));
  target.release(broken);
}

/** An error of the run in the target that is neither batch-level nor isolated by splitting (e.g.
 *  the marker insert failed): the batch's. */
export function failedInTarget(lease: Lease, err: unknown): BatchFailure {
  return new BatchFailure(`shard ${lease.id} failed in the target: ${describeError(err)}`, undefined, { cause: err });
}
