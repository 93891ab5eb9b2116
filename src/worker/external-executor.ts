// The external path: a shard whose handler runs outside the center's database (a business
// database, an HTTP service, a code handler). The center never holds its timeout rows locked
// across that call:
//   1. claim (external_claim.sql): due rows of the shard's kind and target -> dispatched, committed;
//      a re-run takes back only the rows it holds and never claims fresh ones;
//   2. apply: in the target's own transaction, first the marker row (timeout_center.markers there,
//      keyed by shard id: every other run of the shard waits or fails on that key), then the
//      handler, then the marker's outcome; an HTTP handler posts once, with an idempotency key;
//   3. commit, fenced: the center's transaction takes the shard's row lock with the lease token
//      (lock_shard.sql) before the target's COMMIT and keeps it until the record, so a run whose
//      lease was lost (frozen, drained, requeued) rolls back instead of committing, and no later
//      run can start between the two commits;
//   4. record (external_record.sql): the outcome in the center (done / skipped / failed, shard
//      counts) in that same transaction, then delete the marker.
// A re-run after a crash between the commits of 3 and 4 fails on the marker's key and records what
// the first run did, without applying again. Where the center allows prepared transactions, a
// shard's first run takes another shape (runTwoPhase, two-phase.ts): claim and record in one center
// transaction, PREPAREd before the business COMMIT; prepared-resolver.ts finishes what a stopped
// worker leaves prepared, by the marker. Batch-level failures (failures.ts) retry the whole
// shard later behind a circuit breaker per kind and target (breakers.ts); row-level failures are
// split and isolated inside the business transaction, in savepoints.
import { BrokenCircuitError } from 'cockatiel';
import type pg from 'pg';
import type { Logger } from 'pino';
import { isConnectionError, isRetryableConflict, pgErrorCode } from '../db/pool.js';
import { compose, sql, statementValues } from '../db/queries.js';
import { AS_TEXT, literalOf, parseIntArray, parseJsonbArray, parseTextArray, withLiteral } from '../db/pg-text.js';
import { bindLiterals } from './bind-literals.js';
import { failpoint } from '../failpoints.js';
import type { Metrics } from '../observability/metrics.js';
import type { CircuitBreakers } from './breakers.js';
import { completeMarker, deleteMarker, fenceForSplit, insertMarker, isMarkerConflict, readMarker, type BusinessDatabases, type Marker } from './business-db.js';
import { applyIsolating } from './batch-isolation.js';
import { describeError, isBatchLevel, UnknownOutcomeError } from './failures.js';
import { BatchFailure, HandlerTimeoutError, normalizeResult, type ShardItem } from './handler-contract.js';
import type { ExternalTarget, ResolvedHandler } from './handlers.js';
import { splitPinned } from './isolate.js';
import { NEWEST_FIRST } from './sql-handler.js';
import type { Lease } from './lease.js';
import { latenessAt, recordOutcome, type Lateness, type ShardCounts, type ShardOutcome } from './outcome.js';
import { withTimeLimit } from './time-limit.js';
import { finishPrepared, gidLiteral, isPrepareRefused, resolvePrepared, runsInTwoPhases, twoPhaseId } from './two-phase.js';
import { addLinksToActive, withSpan } from '../observability/tracing.js';

export type ExternalOutcome = Exclude<ShardOutcome, { status: 'held' }>;

/** external_claim.sql for every other shard of a flood mapped ahead (take_lease.sql from_newest):
 *  the newest rows due by the flood's instant first, so two running shards walk past each other's
 *  held rows from opposite ends. */
const NEWEST_EXTERNAL_CLAIM = compose('worker/external_claim', { claimOrder: NEWEST_FIRST });

/** A target that no business database name can be: biz_ids the routing rule cannot place. */
const UNROUTABLE = '-unroutable';

interface Claimed {
  target: string | null;
  /** False when the rows were held by an earlier run of the shard: a marker may exist. */
  fresh: boolean;
  /** Set once the target said there is no marker (or the run wrote its own). */
  markerKnown: boolean;
  items: ShardItem[];
  /** The items' biz_ids, in their order (never changed: their literal may be known, pg-text.ts). */
  bizIds: string[];
  /** Up to 32 distinct schedule trace contexts of the claimed rows (external_claim.sql). */
  traceParents: string[];
}

/** What a run decided, in biz_ids: the record writes it. */
type Decision = Marker & {
  fromMarker: boolean;
  /** The run handled every row the shard holds (it wrote its own marker, naming every row its
   *  claim returned: the shard's held and dispatched rows, which nothing else changes while the
   *  lease is ours): the record is told so (ran NULL) instead of being sent the list again. */
  ranAll?: boolean;
  where: pg.Pool | undefined;
  /** The center's transaction holding the shard's row lock since before the target's commit
   *  (step 3): the record goes in it. */
  center?: CenterLock | undefined;
};

/** The shard's counts as recorded, and the lateness of the rows it wrote at the end of the record,
 *  after the target's commit (external_record.sql). */
type Recorded = ShardCounts & { lateness: Lateness };

/** What external_record.sql (or its Citus form's close) returns: at_ms, PostgreSQL's clock at the
 *  end of the record; the lateness per distinct due time measured at measured_ms (its start). */
type RecordRow = ShardCounts & { at_ms: number; measured_ms: number; lateness_ms: number[] | null; lateness_n: number[] | null };

function recordedFrom(row: RecordRow): Recorded {
  const { at_ms, measured_ms, lateness_ms, lateness_n, ...counts } = row;
  const measured = { seconds: (lateness_ms ?? []).map((ms) => ms / 1000), times: lateness_n ?? [] };
  return { ...counts, lateness: latenessAt(measured, Number(measured_ms), Number(at_ms)) };
}

/** A two-phase run's business transaction, open after its handler (applyUncommitted). */
interface UncommittedRun {
  client: pg.PoolClient;
  marker: Marker;
  release: (destroy: Error | boolean) => void;
}

/** How long past its kind's time limit a two-phase run's transactions may sit idle before their
 *  server ends them: a frozen worker's locks go then, and a payer's cancel with them. */
const TWO_PHASE_IDLE_MS = 5000;

/** external_two_phase_claim.sql's row, as text (AS_TEXT). */
interface TwoPhaseClaimRow {
  target: string | null;
  biz_ids: string;
  /** a tid[] literal, passed back to external_two_phase_move.sql as it came */
  ctids: string;
  payloads: string | null;
  trace_parents: string | null;
  lateness_ms: string;
  lateness_n: string;
  measured_ms: string;
  at_ms: string;
}

/** A two-phase run found a marker of the shard in the target (or one held there): the
 *  commit-first run reads it. */
class MarkerInTheWay extends BatchFailure {
  override name = 'MarkerInTheWay';
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

/** A two-phase run that left nothing and hands the shard to the commit-first run, with the batch
 *  failure of its handler when that is why (the commit-first run records it instead of calling the
 *  handler again). */
interface CommitFirst {
  batchFailure?: unknown;
}

/** external_two_phase_claim.sql for every other shard of a flood mapped ahead: newest first. */
const NEWEST_TWO_PHASE_CLAIM = compose('worker/external_two_phase_claim', { claimOrder: NEWEST_FIRST });

/** The run found its lease gone (or the shard split by a later run): nothing was committed. */
type Lost = { lost: string };

/** A transaction on the center's database that holds the shard's row (lock_shard.sql, FOR KEY
 *  SHARE): the reaper, a drain's release and another worker's take_lease all skip or wait for it,
 *  while the lease keeper can still renew. */
class CenterLock {
  private done = false;
  constructor(readonly client: pg.PoolClient) {}

  async commit(): Promise<void> {
    if (this.done) return;
    this.done = true;
    try {
      await this.client.query('COMMIT');
      this.client.release();
    } catch (err) {
      this.client.release(true);
      throw err;
    }
  }

  async rollback(): Promise<void> {
    if (this.done) return;
    this.done = true;
    let broken = false;
    await this.client.query('ROLLBACK').catch(() => (broken = true));
    this.client.release(broken);
  }
}

export class ExternalExecutor {
  /** Runs commit in two phases where they can (runTwoPhase): the center's server allows prepared
   *  transactions (max_prepared_transactions > 0), checked by the worker at start. Turned off for
   *  good when PREPARE TRANSACTION says they are off. */
  private twoPhase: boolean;

  constructor(
    private readonly pool: pg.Pool,
    private readonly databases: BusinessDatabases,
    private readonly breakers: CircuitBreakers,
    private readonly metrics: Metrics,
    options: { twoPhase?: boolean } = {},
  ) {
    this.twoPhase = options.twoPhase ?? false;
  }

  async run(lease: Lease, handler: ResolvedHandler & { external: ExternalTarget }, log: Logger): Promise<ExternalOutcome> {
    if (this.twoPhase && lease.attempts === 1 && lease.bucket === null && runsInTwoPhases(handler.external)) {
      const outcome = await this.runTwoPhase(lease, handler, log);
      if ('status' in outcome) return outcome;
      return this.runCommitFirst(lease, handler, log, outcome.batchFailure);
    }
    return this.runCommitFirst(lease, handler, log);
  }

  /** The commit-first run (steps 1-4 of the header): every run on the Citus layout, with an HTTP
   *  handler, a re-run, and any run where two phases are not possible. */
  private async runCommitFirst(
    lease: Lease,
    handler: ResolvedHandler & { external: ExternalTarget },
    log: Logger,
    batchFailure?: unknown,
  ): Promise<ExternalOutcome> {
    const started = performance.now();
    const claimed = await withSpan('tc.claim', { 'tc.claim.form': 'external' }, () => this.claim(lease, handler.external));
    if (!claimed) return { status: 'not-ours', reason: `lease on shard ${lease.id} was lost before its claim` };
    // The shard's span (tc.shard, active here) links to the schedule requests of what it applies,
    // as on the same-database path (executor.ts).
    addLinksToActive(claimed.traceParents);
    await failpoint('external.after-claim');
    const { items } = claimed;
    const kc = handler.config;
    const target = claimed.target ?? handler.external.via;
    const shardLog = log.child({ target });
    if (!claimed.fresh && lease.attempts > 1 && items.length >= 2 && claimed.target !== UNROUTABLE) {
      const split = await this.isolate(lease, handler.external, claimed, shardLog);
      if (split) return split;
    }
    let decision: Decision | Lost | { retryInMs: number; error: string };
    if (items.length === 0) {
      // Nothing to run: the record leaves any row the shard may hold as it is (ran names none).
      decision = { applied: [], failed: [], ran: [], fromMarker: false, where: undefined };
    } else if (claimed.target === UNROUTABLE) {
      const error = `biz_id cannot be placed by the routing rule of ${lease.kind} (not an integer under modulo/range, or outside every range): fix the rule or the id`;
      decision = { applied: [], failed: items.map((i) => ({ bizId: i.bizId, error, permanent: true })), fromMarker: false, where: undefined };
    } else if (batchFailure !== undefined && claimed.fresh) {
      // The two-phase run of this attempt called the handler a moment ago and it failed as a batch
      // (nothing committed there: no COMMIT was sent): recorded as that failure, not a second call
      // (which would count twice on the breaker and pay a slow handler's time limit twice).
      const retryAfter = batchFailure instanceof BatchFailure ? batchFailure.retryAfterMs : undefined;
      decision = { retryInMs: this.breakers.retryDelayMs(lease.kind, target, kc.backoffMs, retryAfter), error: describeError(batchFailure) };
    } else {
      // While the breaker is open cockatiel refuses the call (BrokenCircuitError) without running
      // it; after halfOpenAfterMs it lets one trial call through.
      try {
        decision = await this.breakers.execute(lease.kind, target, () =>
          withSpan('tc.handler', { 'tc.kind': lease.kind, 'tc.target': target, 'tc.handler.items': items.length }, () =>
            this.apply(lease, handler, claimed, shardLog),
          ),
        );
      } catch (err) {
        if (!(err instanceof BrokenCircuitError) && !(err instanceof UnknownOutcomeError) && !isBatchLevel(err)) throw err;
        const retryAfter = err instanceof BatchFailure ? err.retryAfterMs : undefined;
        decision = { retryInMs: this.breakers.retryDelayMs(lease.kind, target, kc.backoffMs, retryAfter), error: describeError(err) };
      }
    }
    if ('lost' in decision) return { status: 'not-ours', reason: decision.lost };
    if ('retryInMs' in decision && handler.external.via !== 'http' && !claimed.markerKnown) {
      // An earlier run of these rows may have committed in the target (or our COMMIT's fate is
      // unknown): only its marker can tell, and the target cannot be read now. Recording a retry
      // could report applied rows as skipped later; instead the shard keeps its rows and waits
      // (its lease set to end after the delay, the attempt not counted), then runs again.
      const deferred = await this.pool.query(
        sql('worker/defer_shard', { shardId: lease.id, leaseToken: lease.lease_token, delayMs: Math.round(decision.retryInMs) }),
      );
      this.metrics.batchFailures.inc({ kind: lease.kind, target });
      shardLog.warn(
        { retryInMs: decision.retryInMs, error: decision.error },
        'external shard waits: the target cannot say yet whether an earlier run committed',
      );
      return { status: 'not-ours', reason: deferred.rowCount ? 'deferred until the target answers' : 'lease lost' };
    }
    await failpoint('external.before-record');
    const recorded = await withSpan('tc.record', {}, () =>
      'center' in decision && decision.center
        ? this.recordFenced(decision.center, lease, handler, decision, shardLog)
        : this.recordWithRetry(lease, handler, decision, shardLog),
    );
    if (!recorded) return { status: 'not-ours', reason: `lease on shard ${lease.id} was lost before its record; the shard's next run reads the marker` };
    const { lateness, ...counts } = recorded;
    if ('where' in decision && decision.where) {
      const where = decision.where;
      await deleteMarker(where, lease.id).catch((err: unknown) =>
        shardLog.warn({ err }, 'could not delete the marker of a recorded shard (harmless: it is never read again)'),
      );
    }
    const kind = lease.kind;
    if ('retryInMs' in decision) {
      this.metrics.batchFailures.inc({ kind, target });
      shardLog.warn(
        { retryInMs: decision.retryInMs, error: decision.error, timeouts: items.length },
        'external batch failed as a whole; its timeouts are retried later (none failed for good)',
      );
    } else if (decision.fromMarker) {
      shardLog.warn(
        { applied: recorded.done, skipped: recorded.skipped },
        'a run of this shard had committed in the target before its worker stopped: recorded what it did from its marker',
      );
    }
    recordOutcome(this.metrics, { store: 'center', kind }, counts, performance.now() - started, 'retryInMs' in decision ? undefined : lateness);
    return { status: 'done', ...counts };
  }

  /**
   * A first run in two phases, when its handler runs in a business database: each timeout is
   * written once in the center, by one transaction that locks it and then moves it to the
   * history with its result, PREPAREd before the business COMMIT and committed after it
   * (two-phase.ts):
   *   1. center: the shard's row under the lease (external_two_phase_begin.sql), the claim
   *      (external_two_phase_claim.sql: locked, nothing written; no claim lock), then a check
   *      that no commit-first claim holds any of the rows (external_two_phase_overlap.sql); kept
   *      open;
   *   2. business: marker (its lease token only), handler, under the kind's time limit, kept open;
   *   3. center: the locked rows moved to done_timeouts, applied or skipped as the handler said,
   *      the shard done (external_two_phase_move.sql), then PREPARE TRANSACTION;
   *   4. business COMMIT, then COMMIT PREPARED, then the marker is deleted.
   * A run that dies before 3's PREPARE leaves nothing (both transactions roll back; the shard runs
   * again after its lease, commit first). One that dies after it leaves a prepared transaction,
   * which prepared-resolver.ts commits if the marker committed and rolls back if not. While the
   * run is open its timeouts are locked: a payer's cancel waits for it (at most the kind's time
   * limit, then the center's server ends the idle transaction of a frozen worker: TWO_PHASE_IDLE_MS).
   * Returns CommitFirst to run the shard commit first instead, with nothing of this attempt left:
   * the kind has a shard running again after its worker stopped (a killer row may be among its
   * rows), the shard has rows pinned to it or was claimed before, the claim overlapped a hold or
   * took nothing, the handler failed as a batch (handed on: the commit-first run records that
   * retry without calling the handler again), had failed rows or its circuit is open, or prepared
   * transactions are refused.
   */
  private async runTwoPhase(lease: Lease, handler: ResolvedHandler & { external: ExternalTarget }, log: Logger): Promise<ExternalOutcome | CommitFirst> {
    const started = performance.now();
    const ext = handler.external;
    const idleMs = handler.config.timeLimitMs + TWO_PHASE_IDLE_MS;
    const center = await this.pool.connect();
    let destroyCenter = false;
    const backOut = async (batchFailure?: unknown): Promise<CommitFirst> => {
      await center.query('ROLLBACK').catch(() => (destroyCenter = true));
      return batchFailure === undefined ? {} : { batchFailure };
    };
    try {
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
      const claim = await withSpan('tc.claim', { 'tc.claim.form': 'external-two-phase' }, async () => {
        // No claim lock (external_claim_lock.sql): the rows stay locked until the run ends, so the
        // claims beside it pass them by; only a hold a commit-first claim committed meanwhile can
        // overlap, and the overlap check finds it (then the run backs out).
        const move = claimStatement('two-phase', lease, ext);
        const overlap = bindLiterals(sql('worker/external_two_phase_overlap', { shardId: lease.id, kind: lease.kind }));
        const results = (await center.query({ text: `${move}; ${overlap}`, types: AS_TEXT })) as unknown as pg.QueryResult[];
        const row = (results[0] as pg.QueryResult<TwoPhaseClaimRow>).rows[0];
        const overlapping = Number((results[1] as pg.QueryResult<{ overlap: string }>).rows[0]!.overlap);
        return row ? { row, overlapping, atNodeMs: performance.now() } : undefined;
      });
      if (!claim) return await backOut();
      const claimed = claimedRows(claim.row.target, true, claim.row, new Set());
      const database = ext.via === 'http' ? undefined : (ext.database ?? (ext.via === 'sql' ? (claimed.target ?? undefined) : undefined));
      // A row another shard held first (a commit-first claim committed meanwhile), a target the
      // rule cannot place, or nothing due: the commit-first run knows what to do with each.
      if (!database || claimed.target === UNROUTABLE || claimed.items.length === 0 || claim.overlapping > 0) return await backOut();
      addLinksToActive(claimed.traceParents);
      await failpoint('external.after-claim');
      const target = claimed.target ?? ext.via;
      const where = this.databases.pool(database);
      let business: UncommittedRun;
      try {
        business = await this.breakers.execute(lease.kind, target, () =>
          withSpan('tc.handler', { 'tc.kind': lease.kind, 'tc.target': target, 'tc.handler.items': claimed.items.length }, () =>
            this.applyUncommitted(where, lease, handler, claimed, idleMs),
          ),
        );
      } catch (err) {
        if (!(err instanceof BrokenCircuitError) && !isBatchLevel(err)) throw err;
        // Nothing was committed in the target (no COMMIT was sent there) nor here: the
        // commit-first run takes the shard from the start. It records this failure as the retry
        // without calling the handler again, unless running again is what resolves it (a lock
        // conflict, a marker in the way); an open circuit refuses it again without a call.
        return await backOut(err instanceof BrokenCircuitError || resolvedByCommitFirst(err) ? undefined : err);
      }
      if (business.marker.failed.length > 0) {
        // Row-level failures are counted, retried and isolated by the commit-first run: undo both.
        business.release(true);
        return await backOut();
      }
      let counts: ShardCounts | undefined;
      const gid = twoPhaseId({ shardId: lease.id, leaseToken: lease.lease_token, database });
      try {
        const moved = await withSpan('tc.record', {}, async () => {
          const { rows } = await center.query<ShardCounts & { moved: number }>(
            sql('worker/external_two_phase_move', {
              shardId: lease.id,
              leaseToken: lease.lease_token,
              ctids: claim.row.ctids,
              applied: business.marker.applied,
            }),
          );
          return rows[0];
        });
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
          if (pgErrorCode(err) === '55000') this.twoPhase = false;
          log.warn(
            { err: describeError(err) },
            'the center refused to prepare an external run; it runs commit first (set max_prepared_transactions above the worker slots)',
          );
          return await backOut();
        }
        throw err;
      }
      try {
        await failpoint('external.after-prepare');
        await business.client.query('COMMIT');
      } catch (err) {
        business.release(true);
        if (!isConnectionError(err)) {
          // The business database answered the COMMIT with an error (a constraint checked at
          // commit, a session it ended for idling: 25P03): its transaction rolled back, nothing is
          // applied there; the center's half is undone too.
          await finishPrepared(this.pool, 'ROLLBACK', gid);
          log.warn(
            { err: describeError(err) },
            'the business database did not commit an external run (its transaction rolled back); the shard runs again commit first',
          );
          return {};
        }
        // Its outcome is unknown: the marker decides, now if the database answers, else later.
        return await this.resolveNow(gid, where, lease, log);
      }
      business.release(false);
      await failpoint('external.after-apply-commit');
      const finished = await finishPrepared(center, 'COMMIT', gid);
      if (finished === 'gone') log.warn('a resolver committed this run before it could (it found the marker): nothing is lost');
      await deleteMarker(where, lease.id).catch((err: unknown) =>
        log.warn({ err }, 'could not delete the marker of a recorded shard (harmless: it is never read again)'),
      );
      // The rows closed at the business COMMIT: their lateness, measured by the claim, moved on to
      // the database clock at the claim's end plus the time since (the COMMIT PREPARED is done).
      const measured = { seconds: parseIntArray(claim.row.lateness_ms).map((ms) => ms / 1000), times: parseIntArray(claim.row.lateness_n) };
      const at = Number(claim.row.at_ms) + (performance.now() - claim.atNodeMs);
      recordOutcome(
        this.metrics,
        { store: 'center', kind: lease.kind },
        counts,
        performance.now() - started,
        latenessAt(measured, Number(claim.row.measured_ms), at),
      );
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
   *  the business database answers; else left to prepared-resolver.ts. */
  private async resolveNow(gid: string, where: pg.Pool, lease: Lease, log: Logger): Promise<ExternalOutcome> {
    try {
      const how = await resolvePrepared(this.pool, where, gid, { shardId: lease.id, leaseToken: lease.lease_token });
      log.warn({ resolution: how }, 'the business commit of a two-phase run broke off; resolved by its marker');
      return { status: 'not-ours', reason: `the business commit of shard ${lease.id} broke off; its prepared center half was ${how}` };
    } catch (err) {
      log.warn({ err: describeError(err) }, 'the business commit of a two-phase run broke off and its marker cannot be read now; the resolver finishes it');
      return { status: 'not-ours', reason: `shard ${lease.id} is prepared in the center until its marker can be read` };
    }
  }

  /**
   * Step 2 of a two-phase run: marker and handler in the business database, under the kind's time
   * limit, left open for the center's PREPARE. Throws batch-level failures,
   * after rolling the transaction back (a connection the limit cut is destroyed).
   */
  private async applyUncommitted(where: pg.Pool, lease: Lease, handler: ResolvedHandler, claimed: Claimed, idleMs: number): Promise<UncommittedRun> {
    const { client, release, released } = await connectTarget(where);
    const limit = handler.config.timeLimitMs;
    const work = async (signal: AbortSignal): Promise<Marker> => {
      await client.query(`BEGIN; SET LOCAL statement_timeout = ${Math.floor(limit)}; SET LOCAL idle_in_transaction_session_timeout = ${idleMs}`);
      // The marker of a two-phase run is read for its lease token only (two-phase.ts
      // resolvePrepared: committed or not); no run ever records from it (a committed one is
      // committed in the center too, by the run or the resolver), so it names no rows and its
      // outcome is not written (the commit-first marker carries both: a re-run records from it).
      try {
        await insertMarker(client, lease.id, lease.lease_token, []);
      } catch (err) {
        // A first run finds no marker; one there (or held) is for the commit-first run to read.
        if (isMarkerConflict(err) || pgErrorCode(err) === '57014' || pgErrorCode(err) === '55P03')
          throw new MarkerInTheWay(`shard ${lease.id} has a marker in the target already`, undefined, { cause: err });
        throw err;
      }
      const call = (batch: ShardItem[]) => {
        if (signal.aborted) throw signal.reason;
        return handler.run(batch, { kind: handler.kind, shardId: lease.id, attempt: lease.attempts, client, signal });
      };
      const { applied, failed, whole } = await applyIsolating(client, claimed.items, call, (err) => isBatchLevel(err) || signal.aborted);
      await failpoint('external.after-apply');
      if (signal.aborted) throw signal.reason;
      return { applied: whole ?? [...applied], failed: [...failed].map(([bizId, f]) => ({ bizId, ...f })), ran: claimed.bizIds };
    };
    try {
      const marker = await withTimeLimit<Marker>(
        {
          what: `handler of ${handler.kind}`,
          limitMs: limit,
          graceMs: 250,
          // The handler may still hold the connection: destroy it (its transaction rolls back).
          onExpire: () => release(new Error('handler time limit: connection destroyed')),
        },
        work,
      );
      return { client, marker, release };
    } catch (err) {
      const broken = isConnectionError(err);
      if (!broken && !released()) await client.query('ROLLBACK').catch(() => release(true));
      release(broken);
      if (isBatchLevel(err) || err instanceof HandlerTimeoutError) throw err;
      throw new BatchFailure(`shard ${lease.id} failed in the target: ${describeError(err)}`, undefined, { cause: err });
    }
  }

  /**
   * A re-run after its worker died (attempt > 1, the rows held by an earlier run): one of them may
   * be what kills workers (a code handler that crashes the process). Unless the earlier run
   * committed in the target (its marker says so; the normal path then records it), the held rows
   * go to two new shards, half each (split_pinned.sql, as on the same-database path), so a killer
   * ends alone in a one-row shard that the reaper abandons, and its shard mates are applied. In a
   * database the split is fenced first (fenceForSplit), so no earlier run can commit there while it
   * happens; the tombstone is deleted once the split committed, as a marker is after its record.
   * Returns undefined to run the shard as usual.
   */
  private async isolate(lease: Lease, external: ExternalTarget, claimed: Claimed, log: Logger): Promise<ExternalOutcome | undefined> {
    let fenced: pg.Pool | undefined;
    if (external.via !== 'http') {
      const database = external.database ?? (external.via === 'sql' ? (claimed.target ?? undefined) : undefined);
      if (external.via === 'sql' && !database) return undefined;
      const where = database ? this.databases.pool(database) : this.pool;
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
    const children = await splitPinned(this.pool, lease.id, lease.scan_id, lease.lease_token, lease.bucket);
    if (children.length === 0) return undefined;
    // The split is committed: the tombstone has done its job (as a run's marker after its record;
    // a crash right here leaves it behind, which is harmless: no run of this shard comes again).
    if (fenced)
      await deleteMarker(fenced, lease.id).catch((err: unknown) => log.warn({ err: describeError(err) }, 'could not delete the split tombstone (harmless)'));
    log.warn({ attempt: lease.attempts, into: children }, 'shard split in two to isolate a row that may kill workers');
    this.metrics.shards.inc({ store: 'center', kind: lease.kind, outcome: 'split' });
    return { status: 'done', done: 0, skipped: 0, failed: 0, retried: 0 };
  }

  /** Step 1: claim and commit (or take back the rows a previous run of the shard holds): the
   *  claims of the kind's target one at a time (external_claim_lock.sql), the
   *  claim, and its give-back (external_unhold.sql, a snapshot of its own) in one transaction, one
   *  round trip. */
  private async claim(lease: Lease, external: ExternalTarget): Promise<Claimed | undefined> {
    const routed = external.via === 'sql' && external.routed;
    if (lease.bucket !== null) return this.claimInBucket(lease, lease.bucket, routed);
    const claim = claimStatement('commit-first', lease, external);
    const unhold = bindLiterals(sql('worker/external_unhold', { shardId: lease.id, kind: lease.kind }));
    const lock = bindLiterals(sql('worker/external_claim_lock', { shardId: lease.id }));
    const results = (await this.pool.query({ text: `BEGIN; ${lock}; ${claim}; ${unhold}; COMMIT`, types: AS_TEXT })) as unknown as pg.QueryResult[];
    return claimedFrom(results[2]!, results[3]!);
  }

  /**
   * Step 1 on the Citus layout (docs/scale.md "Citus: what runs"): the shard's row on the
   * coordinator, locked under this run's lease and marked claimed (citus/worker/external_claim_shard.sql),
   * then the claim in the shard's bucket, a router query on one worker node
   * (citus/worker/external_claim.sql), committed together: two round trips. Citus refuses the
   * plain statement, one query that locks rows on a worker node and writes the coordinator's shards.
   */
  private async claimInBucket(lease: Lease, bucket: number, routed: boolean): Promise<Claimed | undefined> {
    const client = await this.pool.connect();
    let broken = false;
    try {
      const shard = bindLiterals(sql('citus/worker/external_claim_shard', { shardId: lease.id, leaseToken: lease.lease_token }));
      const first = (await client.query({ text: `BEGIN; ${shard}`, types: AS_TEXT })) as unknown as pg.QueryResult[];
      const ours = (first[1] as pg.QueryResult<{ target: string | null; fresh: string }>).rows[0];
      if (!ours) {
        await client.query('ROLLBACK');
        return undefined;
      }
      const fresh = ours.fresh === 't';
      const claim = bindLiterals(
        sql('citus/worker/external_claim', { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, fresh, bucket, routed, target: ours.target }),
      );
      const second = (await client.query({ text: `${claim}; COMMIT`, types: AS_TEXT })) as unknown as pg.QueryResult[];
      return claimedRows(ours.target, fresh, (second[0] as pg.QueryResult<ClaimRow>).rows[0]!, new Set());
    } catch (err) {
      broken = isConnectionError(err);
      if (!broken) await client.query('ROLLBACK').catch(() => (broken = true));
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /** Step 2: the handler where it runs. Throws only batch-level failures. */
  private async apply(lease: Lease, handler: ResolvedHandler & { external: ExternalTarget }, claimed: Claimed, log: Logger): Promise<Decision | Lost> {
    const ext = handler.external;
    if (ext.via === 'http') {
      // The HTTP handler keeps its own time limit (http-handler.ts) and needs no client.
      const controller = new AbortController();
      const result = normalizeResult(
        await handler.run(claimed.items, {
          kind: lease.kind,
          shardId: lease.id,
          attempt: lease.attempts,
          signal: controller.signal,
          client: undefined as unknown as pg.PoolClient,
        }),
      );
      return {
        applied: result.applied,
        failed: (result.failed ?? []).map((f) => ({ bizId: String(f.bizId), error: f.error, permanent: false })),
        fromMarker: false,
        where: undefined,
      };
    }
    const database = ext.database ?? (ext.via === 'sql' ? (claimed.target ?? undefined) : undefined);
    if (ext.via === 'sql' && !database) throw new BatchFailure(`shard ${lease.id} of ${lease.kind} has no target database`);
    const where = database ? this.databases.pool(database) : this.pool;
    return this.applyInTransaction(where, lease, handler, claimed, log);
  }

  /**
   * The marker, the handler and the marker's outcome in one transaction on the target database,
   * committed only while the center holds the shard's row under this run's lease (step 3). The
   * whole run has the kind's time limit: past it the handler's signal aborts and its connection is
   * destroyed (the transaction rolls back; the handler is not called again on it), a batch-level
   * failure, except while the run waits for the marker (another run of the shard holds it: its
   * outcome is unknown) or commits: then the shard waits and its next run reads the marker.
   */
  private async applyInTransaction(where: pg.Pool, lease: Lease, handler: ResolvedHandler, claimed: Claimed, log: Logger): Promise<Decision | Lost> {
    const { items } = claimed;
    const { client, release, released } = await connectTarget(where);
    const limit = handler.config.timeLimitMs;
    // Where the run is when the time limit falls (an object: the closure below moves it on).
    const at: { phase: 'marker' | 'handler' | 'commit' } = { phase: 'marker' };
    let center: CenterLock | undefined;
    const work = async (signal: AbortSignal): Promise<Decision | Lost> => {
      await client.query(`BEGIN; SET LOCAL statement_timeout = ${Math.floor(limit)}`);
      const ran = claimed.bizIds;
      try {
        await insertMarker(client, lease.id, lease.lease_token, ran);
      } catch (err) {
        if (isMarkerConflict(err)) {
          // An earlier run of this shard committed here (its worker died before its record, or
          // its lease ran out while it worked): record what it did; never apply again.
          await client.query('ROLLBACK');
          const found = await readMarker(client, lease.id);
          if (found === 'split') return { lost: `shard ${lease.id} was split by a later run (its tombstone is in the target)` };
          if (!found) return { lost: `another run of shard ${lease.id} committed and recorded it meanwhile` };
          log.warn('an earlier run of this shard committed in the target; recording its outcome');
          return { ...found, fromMarker: true, where };
        }
        if (pgErrorCode(err) === '57014' || pgErrorCode(err) === '55P03') {
          claimed.markerKnown = false;
          throw new UnknownOutcomeError(
            `another run of shard ${lease.id} holds its marker in the target (a stopped or still committing worker): this run waits for it`,
            { cause: err },
          );
        }
        throw err;
      }
      claimed.markerKnown = true;
      at.phase = 'handler';
      const call = (batch: ShardItem[]) => {
        if (signal.aborted) throw signal.reason;
        return handler.run(batch, { kind: handler.kind, shardId: lease.id, attempt: lease.attempts, client, signal });
      };
      const { applied, failed, whole } = await applyIsolating(client, items, call, (err) => isBatchLevel(err) || signal.aborted);
      await failpoint('external.after-apply');
      const marker: Marker = { applied: whole ?? [...applied], failed: [...failed].map(([bizId, f]) => ({ bizId, ...f })), ran };
      await completeMarker(client, lease.id, marker);
      const lock = await this.lockLease(lease);
      if (!lock) {
        await client.query('ROLLBACK');
        return { lost: `lease on shard ${lease.id} was lost before its commit in the target (requeued or taken over): rolled back, nothing applied` };
      }
      if (signal.aborted) {
        await lock.rollback();
        throw signal.reason;
      }
      center = lock;
      await failpoint('external.before-business-commit');
      at.phase = 'commit';
      await client.query('COMMIT');
      await failpoint('external.after-apply-commit');
      return { ...marker, fromMarker: false, ranAll: true, where, center: lock };
    };
    try {
      return await withTimeLimit<Decision | Lost>(
        {
          what: `handler of ${handler.kind}`,
          limitMs: limit,
          graceMs: 250,
          // The handler may still hold the connection: destroy it rather than reuse it.
          onExpire: () => release(new Error('handler time limit: connection destroyed')),
          // A run that comes back after its limit holding the center's lock lets it go.
          onLate: (late) => void ('center' in late ? late.center?.rollback() : undefined),
        },
        work,
      );
    } catch (err) {
      await center?.rollback();
      if (err instanceof HandlerTimeoutError && at.phase !== 'handler') {
        // The limit fell while waiting for another run's marker (that run may commit) or while
        // COMMIT was on its way (ours may have happened).
        claimed.markerKnown = false;
        throw new UnknownOutcomeError(
          at.phase === 'commit'
            ? `shard ${lease.id} reached its time limit while committing in the target: the shard's next run reads its marker`
            : `shard ${lease.id} reached its time limit waiting for another run's marker in the target: the shard waits for it`,
          { cause: err },
        );
      }
      if (err instanceof HandlerTimeoutError || err instanceof UnknownOutcomeError) {
        // A run that gave up waiting for another run's marker (57014, 55P03) holds a connection
        // in its aborted transaction: back to the pool only once out of it (else the next shard
        // on this database fails at BEGIN, 25P02). A timed-out or broken one is already destroyed.
        if (!released()) await client.query('ROLLBACK').catch(() => release(true));
        throw err;
      }
      if (at.phase === 'commit' && isConnectionError(err)) {
        claimed.markerKnown = false;
        release(true);
        throw new UnknownOutcomeError(`the connection broke while committing shard ${lease.id} in the target: the shard's next run reads its marker`, {
          cause: err,
        });
      }
      const broken = isConnectionError(err);
      if (!broken && !released()) await client.query('ROLLBACK').catch(() => release(true));
      release(broken);
      if (isBatchLevel(err)) throw err;
      // Not batch-level yet not isolated by splitting (e.g. the marker insert failed): the batch.
      throw new BatchFailure(`shard ${lease.id} failed in the target: ${describeError(err)}`, undefined, { cause: err });
    } finally {
      release(false);
    }
  }

  /** Step 3's fence: the shard's row, under this run's lease, in an open center transaction.
   *  Undefined when the lease is no longer ours. */
  private async lockLease(lease: Lease): Promise<CenterLock | undefined> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const { rowCount } = await client.query(sql('worker/lock_shard', { shardId: lease.id, leaseToken: lease.lease_token }));
      const lock = new CenterLock(client);
      if (rowCount === 0) {
        await lock.rollback();
        return undefined;
      }
      return lock;
    } catch (err) {
      client.release(true);
      throw err;
    }
  }

  /** The record survives a short loss of the center's connection (deadlock, restart): the marker
   *  would make a re-run safe anyway, but it would wait for the lease to run out. */
  private async recordWithRetry(
    lease: Lease,
    handler: ResolvedHandler,
    decision: Decision | { retryInMs: number; error: string },
    log: Logger,
  ): Promise<Recorded | undefined> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.record(lease, handler, decision);
      } catch (err) {
        if (attempt >= 4 || !(isConnectionError(err) || isRetryableConflict(err))) throw err;
        log.warn({ err, attempt }, 'recording the external shard failed on a transient error; retrying');
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
  }

  /** Step 4 in the transaction that fenced the commit. If the center fails there, the marker is
   *  committed: the record is retried on its own, as a re-run would. */
  private async recordFenced(center: CenterLock, lease: Lease, handler: ResolvedHandler, decision: Decision, log: Logger): Promise<Recorded | undefined> {
    try {
      const recorded = await this.record(lease, handler, decision, center.client);
      await center.commit();
      return recorded;
    } catch (err) {
      await center.rollback();
      if (!(isConnectionError(err) || isRetryableConflict(err))) throw err;
      log.warn({ err }, 'recording the external shard failed on a transient error; retrying');
      return this.recordWithRetry(lease, handler, decision, log);
    }
  }

  /** Step 4: the outcome in the center. Undefined when the lease is no longer ours. */
  private async record(
    lease: Lease,
    handler: ResolvedHandler,
    decision: Decision | { retryInMs: number; error: string },
    db: pg.Pool | pg.PoolClient = this.pool,
  ): Promise<Recorded | undefined> {
    const inputs = recordInputs(lease, handler, decision);
    if (lease.bucket !== null) return this.recordInBucket(inputs, lease.bucket, db);
    const { rows } = await db.query<RecordRow>(sql('worker/external_record', inputs));
    return rows[0] ? recordedFrom(rows[0]) : undefined;
  }

  /**
   * Step 4 on the Citus layout (docs/scale.md "Citus: what runs"), in one transaction: the shard's
   * row under this run's lease, FOR UPDATE on the coordinator (citus/worker/external_record_lock.sql);
   * the shard's rows written in its bucket (citus/worker/external_record.sql: on the bucket's worker
   * node, the history rows through the coordinator as intermediate results); the shard closed with
   * their counts (citus/worker/external_close_shard.sql). Three round trips where one PostgreSQL
   * takes one: Citus refuses FOR UPDATE, and a VOLATILE function in an UPDATE's SET, in a query
   * that writes distributed tables. `db` is the fenced transaction (recordFenced), or the pool: then
   * a transaction of its own.
   */
  private async recordInBucket(inputs: ExternalRecordInputs, bucket: number, db: pg.Pool | pg.PoolClient): Promise<Recorded | undefined> {
    // a PoolClient (the fenced transaction) has release(); the pool has not
    const own = 'release' in db ? undefined : await db.connect();
    const client = own ?? (db as pg.PoolClient);
    let broken = false;
    try {
      if (own) await own.query('BEGIN');
      const locked = await client.query(sql('citus/worker/external_record_lock', { shardId: inputs.shardId, leaseToken: inputs.leaseToken }));
      let row: RecordRow | undefined;
      if (locked.rowCount) {
        const { rows: written } = await client.query<
          ShardCounts & { n: number; error_sample: string | null } & Pick<RecordRow, 'measured_ms' | 'lateness_ms' | 'lateness_n'>
        >(sql('citus/worker/external_record', { ...inputs, bucket }));
        const w = written[0]!;
        const { rows } = await client.query<ShardCounts & { at_ms: number }>(
          sql('citus/worker/external_close_shard', {
            shardId: inputs.shardId,
            leaseToken: inputs.leaseToken,
            size: w.n,
            done: w.done,
            skipped: w.skipped,
            failed: w.failed,
            retried: w.retried,
            errorSample: w.error_sample,
          }),
        );
        const closed = rows[0];
        if (closed) row = { ...closed, measured_ms: w.measured_ms, lateness_ms: w.lateness_ms, lateness_n: w.lateness_n };
      }
      if (own) await own.query(row ? 'COMMIT' : 'ROLLBACK');
      return row ? recordedFrom(row) : undefined;
    } catch (err) {
      broken = isConnectionError(err);
      if (own && !broken) await own.query('ROLLBACK').catch(() => (broken = true));
      throw err;
    } finally {
      own?.release(broken);
    }
  }
}

/** external_record.sql's inputs (the Citus form adds the shard's bucket). */
type ExternalRecordInputs = {
  shardId: number;
  leaseToken: string;
  applied: string[];
  failedIds: string[];
  failedErrors: string[];
  failedPermanent: boolean[];
  maxAttempts: number;
  backoffMs: number;
  batchRetryMs: number | null;
  batchError: string | null;
  ran: string[] | null;
};

/** A claim's row as text (AS_TEXT): external_claim.sql's (payloads NULL when the handler does
 *  not read them), or its Citus form's (whose arrays are NULL when it took no row). */
interface ClaimRow {
  biz_ids: string | null;
  payloads: string | null;
  trace_parents: string | null;
}

/** The claimed rows, less those given back to a shard that held them first (external_unhold.sql,
 *  by biz_id: one live timeout per kind and biz_id). */
function claimedRows(target: string | null, fresh: boolean, row: ClaimRow, givenBack: ReadonlySet<string>): Claimed {
  const bizIds = parseTextArray(row.biz_ids ?? '{}');
  const payloads = row.payloads === null ? [] : parseJsonbArray(row.payloads);
  const all = bizIds.map((bizId, i) => ({ bizId, payload: payloads[i] }));
  let kept = { bizIds, items: all };
  if (givenBack.size === 0) {
    // the whole claim: the items' biz_ids go to the handler and the marker as the claim sent them
    const literal = literalOf(bizIds);
    if (literal !== undefined) withLiteral(all, literal);
  } else {
    const keep = bizIds.map((bizId) => !givenBack.has(bizId));
    kept = { bizIds: bizIds.filter((_, i) => keep[i]), items: all.filter((_, i) => keep[i]) };
  }
  return {
    target,
    fresh,
    markerKnown: fresh,
    items: kept.items,
    bizIds: kept.bizIds,
    traceParents: row.trace_parents === null || row.trace_parents === '{}' ? [] : parseTextArray(row.trace_parents),
  };
}

/** A claim for a lease, bound, oldest or newest first: external_claim.sql (commit first) or
 *  external_two_phase_claim.sql (two phases), which take the same inputs. */
function claimStatement(form: 'commit-first' | 'two-phase', lease: Lease, external: ExternalTarget): string {
  const routed = external.via === 'sql' && external.routed;
  const payloads = external.via !== 'sql' || external.payloads;
  const inputs = { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, leaseToken: lease.lease_token, routed, payloads };
  if (form === 'two-phase')
    return lease.from_newest
      ? bindLiterals(NEWEST_TWO_PHASE_CLAIM, statementValues('worker/external_two_phase_claim', inputs))
      : bindLiterals(sql('worker/external_two_phase_claim', inputs));
  return lease.from_newest
    ? bindLiterals(NEWEST_EXTERNAL_CLAIM, statementValues('worker/external_claim', inputs))
    : bindLiterals(sql('worker/external_claim', inputs));
}

/** The claim's rows from external_claim.sql's and external_unhold.sql's results (undefined: the
 *  lease is no longer ours). */
function claimedFrom(claimResult: pg.QueryResult, unholdResult: pg.QueryResult): Claimed | undefined {
  const row = (claimResult as pg.QueryResult<{ target: string | null; biz_ids: string; payloads: string | null; fresh: string; trace_parents: string | null }>)
    .rows[0];
  if (!row) return undefined;
  const givenBack = new Set(parseTextArray((unholdResult as pg.QueryResult<{ given_back: string }>).rows[0]!.given_back));
  return claimedRows(row.target, row.fresh === 't', row, givenBack);
}

/** external_record.sql's inputs for a run's decision (or a batch-level failure). */
function recordInputs(lease: Lease, handler: ResolvedHandler, decision: Decision | { retryInMs: number; error: string }): ExternalRecordInputs {
  const batch = 'retryInMs' in decision;
  const failed = batch ? [] : decision.failed;
  return {
    shardId: lease.id,
    leaseToken: lease.lease_token,
    applied: batch ? [] : decision.applied,
    failedIds: failed.map((f) => f.bizId),
    failedErrors: failed.map((f) => f.error),
    failedPermanent: failed.map((f) => f.permanent),
    maxAttempts: handler.config.maxAttempts,
    backoffMs: handler.config.backoffMs,
    batchRetryMs: batch ? Math.round(decision.retryInMs) : null,
    batchError: batch ? decision.error : null,
    ran: batch || decision.ranAll ? null : (decision.ran ?? null),
  };
}

/** A connection to the target database for a run's transaction, and its release, which acts once
 *  (the time limit may destroy the connection while the run still holds it). A connection that
 *  cannot be had is a batch-level failure. */
async function connectTarget(where: pg.Pool): Promise<{ client: pg.PoolClient; release: (destroy: Error | boolean) => void; released: () => boolean }> {
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
