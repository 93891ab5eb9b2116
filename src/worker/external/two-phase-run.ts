/**
 * A first run in two phases, when its handler runs in a business database: each timeout is
 * written once in the center, by one transaction that locks it and then moves it to the history
 * with its result, PREPAREd before the business COMMIT and committed after it (../two-phase.ts):
 *   1. claim, center (claim.ts): the shard's row under the lease (external_two_phase_begin.sql),
 *      the claim (external_two_phase_claim.sql: locked, nothing written; no claim lock), then a
 *      check that no commit-first claim holds any of the rows (external_two_phase_overlap.sql);
 *      kept open;
 *   2. apply, business (apply.ts, whose pieces the commit-first run shares): marker (its lease
 *      token only), handler, under the kind's time limit, kept open;
 *   3. record, center (record.ts): the locked rows moved to done_timeouts, applied or skipped as
 *      the handler said, the shard done (external_two_phase_move.sql), then PREPARE TRANSACTION;
 *   4. business COMMIT, then COMMIT PREPARED, then the marker is deleted.
 * A run that dies before 3's PREPARE leaves nothing (both transactions roll back; the shard runs
 * again after its lease, commit first). One that dies after it leaves a prepared transaction,
 * which ../prepared-resolver.ts commits if the marker committed and rolls back if not. While the
 * run is open its timeouts are locked: a payer's cancel waits for it (at most the kind's time
 * limit, then the center's server ends the idle transaction of a frozen worker: TWO_PHASE_IDLE_MS).
 * A run that backs out hands the shard to the commit-first run (CommitFirst), with nothing of this
 * attempt left: the kind has a shard running again after its worker stopped (a killer row may be
 * among its rows), the shard has rows pinned to it or was claimed before, the claim overlapped a
 * hold or took nothing, the handler failed as a batch (handed on: the commit-first run records
 * that retry without calling the handler again), had failed rows or its circuit is open, or
 * prepared transactions are refused.
 */
import { BrokenCircuitError } from 'cockatiel';
import type pg from 'pg';
import type { Logger } from 'pino';
import { isConnectionError, isRetryableConflict, pgErrorCode } from '../../db/pool.js';
import { sql } from '../../db/queries.js';
import { AS_TEXT } from '../../db/pg-text.js';
import { failpoint } from '../../failpoints.js';
import { addLinksToActive, withSpan } from '../../observability/tracing.js';
import { bindLiterals } from '../bind-literals.js';
import { forgetMarker } from '../business-db.js';
import { describeError, isBatchLevel } from '../failures.js';
import type { Lease } from '../lease.js';
import { latenessAt, recordOutcome, type ShardCounts } from '../outcome.js';
import { finishPrepared, gidLiteral, isPrepareRefused, resolvePrepared, twoPhaseId } from '../two-phase.js';
import { applyUncommitted, MarkerInTheWay, underBreaker, type UncommittedRun } from './apply.js';
import { claimTwoPhase, targetDatabase, UNROUTABLE } from './claim.js';
import type { ExternalContext, ExternalHandler, ExternalOutcome } from './context.js';
import { recordTwoPhase } from './record.js';

/** How long past its kind's time limit a two-phase run's transactions may sit idle before their
 *  server ends them: a frozen worker's locks go then, and a payer's cancel with them. */
const TWO_PHASE_IDLE_MS = 5000;

/** A two-phase run that left nothing and hands the shard to the commit-first run, with the batch
 *  failure of its handler when that is why (the commit-first run records it instead of calling the
 *  handler again); preparedOff: the center said prepared transactions are off (55000), so no
 *  later run of this worker tries two phases. */
export interface CommitFirst {
  batchFailure?: unknown;
  preparedOff?: boolean;
}

/** Whether the commit-first run resolves a two-phase run's batch failure by running at once
 *  rather than repeating it: a marker in the way (the commit-first run reads it), or a lock the
 *  handler gave up waiting on, or a deadlock: the two-phase run held the timeouts locked in the
 *  center meanwhile (a payer in the unsafe order waits on them), the commit-first run holds none
 *  while it calls out (README 3, "cancel first"). */
function resolvedByCommitFirst(err: unknown): boolean {
  const cause = err instanceof Error ? err.cause : undefined;
  return err instanceof MarkerInTheWay || isRetryableConflict(err) || isRetryableConflict(cause);
}

export async function runTwoPhase(ctx: ExternalContext, lease: Lease, handler: ExternalHandler, log: Logger): Promise<ExternalOutcome | CommitFirst> {
  const started = performance.now();
  const ext = handler.external;
  const idleMs = handler.config.timeLimitMs + TWO_PHASE_IDLE_MS;
  const center = await ctx.pool.connect();
  let destroyCenter = false;
  const backOut = async (handOn: CommitFirst = {}): Promise<CommitFirst> => {
    await center.query('ROLLBACK').catch(() => (destroyCenter = true));
    return handOn;
  };
  try {
    // 1. claim
    const begin = bindLiterals(sql('worker/external_two_phase_begin', { shardId: lease.id, leaseToken: lease.lease_token }));
    const opened = (await center.query({
      text: `BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${idleMs}; ${begin}`,
      types: AS_TEXT,
    })) as unknown as pg.QueryResult[];
    const ours = (opened[2] as pg.QueryResult<{ two_phase: string }>).rows[0];
    if (!ours) {
      await backOut();
      return { status: 'not-ours', reason: `lease on shard ${lease.id} was lost before its claim` };
    }
    if (ours.two_phase !== 't') return await backOut();
    const claim = await withSpan('tc.claim', { 'tc.claim.form': 'external-two-phase' }, () => claimTwoPhase(center, lease, ext));
    if (!claim) return await backOut();
    const { claimed } = claim;
    const database = targetDatabase(ext, claimed.target);
    // A row another shard held first (a commit-first claim committed meanwhile), a target the
    // rule cannot place, or nothing due: the commit-first run knows what to do with each.
    if (!database || claimed.target === UNROUTABLE || claimed.items.length === 0 || claim.overlapping > 0) return await backOut();
    addLinksToActive(claimed.traceParents);
    await failpoint('external.after-claim');

    // 2. apply
    const target = claimed.target ?? ext.via;
    const where = ctx.databases.pool(database);
    let business: UncommittedRun;
    try {
      business = await underBreaker(ctx.breakers, lease, target, claimed.items.length, () => applyUncommitted(where, lease, handler, claimed, idleMs));
    } catch (err) {
      if (!(err instanceof BrokenCircuitError) && !isBatchLevel(err)) throw err;
      // Nothing was committed in the target (no COMMIT was sent there) nor here: the
      // commit-first run takes the shard from the start. It records this failure as the retry
      // without calling the handler again, unless running again is what resolves it (a lock
      // conflict, a marker in the way); an open circuit refuses it again without a call.
      return await backOut(err instanceof BrokenCircuitError || resolvedByCommitFirst(err) ? {} : { batchFailure: err });
    }
    if (business.marker.failed.length > 0) {
      // Row-level failures are counted, retried and isolated by the commit-first run: undo both.
      business.release(true);
      return await backOut();
    }

    // 3. record, prepared
    let counts: ShardCounts | undefined;
    const gid = twoPhaseId({ shardId: lease.id, leaseToken: lease.lease_token, database });
    try {
      const moved = await withSpan('tc.record', {}, () => recordTwoPhase(center, lease, claim.ctids, business.marker.applied));
      if (!moved) throw new Error(`shard ${lease.id}: its record found no lease although the run holds its row`);
      const { moved: n, ...recorded } = moved;
      if (n !== claimed.items.length) {
        // The claim's locks keep every row where it was: a difference is a bug, never a race.
        // Nothing is prepared yet: undo both halves, and the commit-first run takes the shard.
        log.error({ claimed: claimed.items.length, moved: n }, 'a two-phase run moved other rows than it claimed; it backs out and runs commit first');
        business.release(true);
        return await backOut();
      }
      counts = recorded;
      await failpoint('external.before-prepare');
      await center.query(`PREPARE TRANSACTION ${gidLiteral(gid)}`);
    } catch (err) {
      // PREPARE that fails rolls the center's transaction back; anything before it is undone here.
      business.release(true);
      if (isPrepareRefused(err)) {
        log.warn(
          { err: describeError(err) },
          'the center refused to prepare an external run; it runs commit first (set max_prepared_transactions above the worker slots)',
        );
        return await backOut(pgErrorCode(err) === '55000' ? { preparedOff: true } : {});
      }
      throw err;
    }

    // 4. business COMMIT, then COMMIT PREPARED
    try {
      await failpoint('external.after-prepare');
      await business.client.query('COMMIT');
    } catch (err) {
      business.release(true);
      if (!isConnectionError(err)) {
        // The business database answered the COMMIT with an error (a constraint checked at
        // commit, a session it ended for idling: 25P03): its transaction rolled back, nothing is
        // applied there; the center's half is undone too.
        await finishPrepared(ctx.pool, 'ROLLBACK', gid);
        log.warn(
          { err: describeError(err) },
          'the business database did not commit an external run (its transaction rolled back); the shard runs again commit first',
        );
        return {};
      }
      // Its outcome is unknown: the marker decides, now if the database answers, else later.
      return await resolveNow(ctx.pool, gid, where, lease, log);
    }
    business.release(false);
    await failpoint('external.after-apply-commit');
    const finished = await finishPrepared(center, 'COMMIT', gid);
    if (finished === 'gone') log.warn('a resolver committed this run before it could (it found the marker): nothing is lost');
    await forgetMarker(where, lease.id, log);
    // The rows closed at the business COMMIT: their lateness, measured by the claim, moved on to
    // the database clock at the claim's end plus the time since (the COMMIT PREPARED is done).
    const at = claim.atMs + (performance.now() - claim.atNodeMs);
    recordOutcome(ctx.metrics, { store: 'center', kind: lease.kind }, counts, performance.now() - started, latenessAt(claim.lateness, claim.measuredMs, at));
    return { status: 'done', ...counts };
  } catch (err) {
    // An open center transaction ends with its session (the server rolls it back); a prepared
    // one stays for the resolver.
    destroyCenter = true;
    throw err;
  } finally {
    center.release(destroyCenter);
  }
}

/** A prepared run whose business COMMIT's outcome is unknown: resolved by its marker at once if
 *  the business database answers; else left to ../prepared-resolver.ts. */
async function resolveNow(pool: pg.Pool, gid: string, where: pg.Pool, lease: Lease, log: Logger): Promise<ExternalOutcome> {
  try {
    const how = await resolvePrepared(pool, where, gid, { shardId: lease.id, leaseToken: lease.lease_token });
    log.warn({ resolution: how }, 'the business commit of a two-phase run broke off; resolved by its marker');
    return { status: 'not-ours', reason: `the business commit of shard ${lease.id} broke off; its prepared center half was ${how}` };
  } catch (err) {
    log.warn({ err: describeError(err) }, 'the business commit of a two-phase run broke off and its marker cannot be read now; the resolver finishes it');
    return { status: 'not-ours', reason: `shard ${lease.id} is prepared in the center until its marker can be read` };
  }
}
