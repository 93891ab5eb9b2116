// The commit-first run of an external shard (every run on the Citus layout, with an HTTP handler,
// a re-run, and any run where two phases are not possible). The center never holds its timeout
// rows locked across the handler's call:
//   1. claim (claim.ts): due rows of the shard's kind and target held by the shard, committed; a
//      re-run takes back only the rows it holds and never claims fresh ones (and splits them when
//      one of them may kill workers: split.ts);
//   2. apply (apply.ts): in the target's own transaction, first the marker row
//      (timeout_center.markers there, keyed by shard id: every other run of the shard waits or
//      fails on that key), then the handler, then the marker's outcome; an HTTP handler posts once;
//   3. commit, fenced (center-lock.ts): the center's transaction takes the shard's row lock with
//      the lease token before the target's COMMIT and keeps it until the record, so a run whose
//      lease was lost rolls back instead of committing, and no later run can start between the
//      two commits;
//   4. record (record.ts): the outcome in the center (done / skipped / failed, shard counts) in
//      that same transaction, then the marker is deleted.
// A re-run after a crash between the commits of 3 and 4 fails on the marker's key and records what
// the first run did, without applying again.
import { BrokenCircuitError } from 'cockatiel';
import type { Logger } from 'pino';
import { sql } from '../../db/queries.js';
import { failpoint } from '../../failpoints.js';
import { addLinksToActive, withSpan } from '../../observability/tracing.js';
import { forgetMarker } from '../business-db.js';
import { describeError, isBatchLevel, UnknownOutcomeError } from '../failures.js';
import { BatchFailure } from '../handler-contract.js';
import type { Lease } from '../lease.js';
import { recordOutcome } from '../outcome.js';
import type { CenterForms } from './center-forms.js';
import { UNROUTABLE, type Claimed } from './claim.js';
import { applyCommitFirst, underBreaker, type Decision, type Lost } from './apply.js';
import type { ExternalContext, ExternalHandler, ExternalOutcome } from './context.js';
import { record, type BatchRetry } from './record.js';
import { mayHoldKiller, splitHeld } from './split.js';

/** A commit-first run of a leased shard; `batchFailure`: the failure of the two-phase run of this
 *  attempt, recorded as the retry instead of calling the handler again (two-phase-run.ts). */
export async function runCommitFirst(
  ctx: ExternalContext,
  forms: CenterForms,
  lease: Lease,
  handler: ExternalHandler,
  log: Logger,
  batchFailure?: unknown,
): Promise<ExternalOutcome> {
  const started = performance.now();
  const claimed = await withSpan('tc.claim', { 'tc.claim.form': 'external' }, () => forms.claim(ctx.pool, lease, handler.external));
  if (!claimed) return { status: 'not-ours', reason: `lease on shard ${lease.id} was lost before its claim` };
  // The shard's span (tc.shard, active here) links to the schedule requests of what it applies,
  // as on the same-database path (executor.ts).
  addLinksToActive(claimed.traceParents);
  await failpoint('external.after-claim');
  const target = claimed.target ?? handler.external.via;
  const shardLog = log.child({ target });
  if (mayHoldKiller(lease, claimed)) {
    const split = await splitHeld(ctx, lease, handler.external, claimed, shardLog);
    if (split) return split;
  }

  const decision = await decide(ctx, lease, handler, claimed, target, shardLog, batchFailure);
  if ('lost' in decision) return { status: 'not-ours', reason: decision.lost };
  if ('retryInMs' in decision && handler.external.via !== 'http' && !claimed.markerKnown) return defer(ctx, lease, target, decision, shardLog);

  await failpoint('external.before-record');
  const recorded = await withSpan('tc.record', {}, () => record(ctx.pool, forms.record, lease, handler, decision, shardLog));
  if (!recorded) return { status: 'not-ours', reason: `lease on shard ${lease.id} was lost before its record; the shard's next run reads the marker` };
  const { lateness, ...counts } = recorded;
  if ('where' in decision && decision.where) await forgetMarker(decision.where, lease.id, shardLog);
  const kind = lease.kind;
  if ('retryInMs' in decision) {
    ctx.metrics.batchFailures.inc({ kind, target });
    shardLog.warn(
      { retryInMs: decision.retryInMs, error: decision.error, timeouts: claimed.items.length },
      'external batch failed as a whole; its timeouts are retried later (none failed for good)',
    );
  } else if (decision.fromMarker) {
    shardLog.warn(
      { applied: recorded.done, skipped: recorded.skipped },
      'a run of this shard had committed in the target before its worker stopped: recorded what it did from its marker',
    );
  }
  recordOutcome(ctx.metrics, { store: 'center', kind }, counts, performance.now() - started, 'retryInMs' in decision ? undefined : lateness);
  return { status: 'done', ...counts };
}

/**
 * A batch failure of rows an earlier run may have committed in the target (or whose COMMIT's fate
 * is unknown): only its marker can tell, and the target cannot be read now. Recording a retry could
 * report applied rows as skipped later; instead the shard keeps its rows and waits (its lease set
 * to end after the delay, the attempt not counted), then runs again.
 */
async function defer(ctx: ExternalContext, lease: Lease, target: string, retry: BatchRetry, log: Logger): Promise<ExternalOutcome> {
  const deferred = await ctx.pool.query(sql('worker/defer_shard', { shardId: lease.id, leaseToken: lease.lease_token, delayMs: Math.round(retry.retryInMs) }));
  ctx.metrics.batchFailures.inc({ kind: lease.kind, target });
  log.warn({ retryInMs: retry.retryInMs, error: retry.error }, 'external shard waits: the target cannot say yet whether an earlier run committed');
  return { status: 'not-ours', reason: deferred.rowCount ? 'deferred until the target answers' : 'lease lost' };
}

/**
 * Steps 2 and 3: the claimed rows' decision. None to run, or a target the routing rule cannot place
 * (failed for good, with the rule named); the batch failure a two-phase run of this attempt handed
 * on (recorded as that retry, not a second call: it would count twice on the breaker and pay a slow
 * handler's time limit twice); else the handler's call behind the breaker. A batch-level failure,
 * an open circuit or an unknown outcome is a BatchRetry.
 */
async function decide(
  ctx: ExternalContext,
  lease: Lease,
  handler: ExternalHandler,
  claimed: Claimed,
  target: string,
  log: Logger,
  batchFailure?: unknown,
): Promise<Decision | Lost | BatchRetry> {
  const { items } = claimed;
  const kc = handler.config;
  // Nothing to run: the record leaves any row the shard may hold as it is (ran names none).
  if (items.length === 0) return { applied: [], failed: [], ran: [], fromMarker: false, where: undefined };
  if (claimed.target === UNROUTABLE) {
    const error = `biz_id cannot be placed by the routing rule of ${lease.kind} (not an integer under modulo/range, or outside every range): fix the rule or the id`;
    return { applied: [], failed: items.map((i) => ({ bizId: i.bizId, error, permanent: true })), fromMarker: false, where: undefined };
  }
  if (batchFailure !== undefined && claimed.fresh) {
    // The two-phase run of this attempt called the handler a moment ago and it failed as a batch
    // (nothing committed there: no COMMIT was sent).
    const retryAfter = batchFailure instanceof BatchFailure ? batchFailure.retryAfterMs : undefined;
    return { retryInMs: ctx.breakers.retryDelayMs(lease.kind, target, kc.backoffMs, retryAfter), error: describeError(batchFailure) };
  }
  try {
    return await underBreaker(ctx.breakers, lease, target, items.length, () => applyCommitFirst(ctx, lease, handler, claimed, log));
  } catch (err) {
    if (!(err instanceof BrokenCircuitError) && !(err instanceof UnknownOutcomeError) && !isBatchLevel(err)) throw err;
    const retryAfter = err instanceof BatchFailure ? err.retryAfterMs : undefined;
    return { retryInMs: ctx.breakers.retryDelayMs(lease.kind, target, kc.backoffMs, retryAfter), error: describeError(err) };
  }
}
