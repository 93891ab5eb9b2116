// Step 2 of an external run, the apply: the handler in the target's own transaction, in the shape
// of each protocol. Both open a connection to the target (connectTarget), call the handler behind
// the kind's circuit breaker for the target (underBreaker), run it on the whole batch with row-level
// failures isolated in savepoints (applyHandler), under the kind's time limit, and clean up a
// transaction that failed (abandon). Commit first (applyCommitFirst): the marker, the handler and
// the marker's outcome, committed only while the center holds the shard's row under this run's
// lease (step 3, center-lock.ts); an HTTP handler posts once. Two phases (applyUncommitted): the
// marker and the handler, left open for the center's PREPARE.
import type pg from 'pg';
import type { Logger } from 'pino';
import { isConnectionError, pgErrorCode } from '../../db/pool.js';
import { failpoint } from '../../failpoints.js';
import { withSpan } from '../../observability/tracing.js';
import { applyIsolating } from '../batch-isolation.js';
import type { CircuitBreakers } from '../breakers.js';
import { completeMarker, insertMarker, isMarkerConflict, readMarker, type Marker } from '../business-db.js';
import { describeError, isBatchLevel, UnknownOutcomeError } from '../failures.js';
import { BatchFailure, HandlerTimeoutError, normalizeResult, type ShardItem } from '../handler-contract.js';
import type { ResolvedHandler } from '../handlers.js';
import type { Lease } from '../lease.js';
import { withTimeLimit } from '../time-limit.js';
import { lockLease, type CenterLock } from './center-lock.js';
import { targetDatabase, type Claimed } from './claim.js';
import type { ExternalContext, ExternalHandler } from './context.js';

/** How long past the kind's time limit a run's handler may take before its connection is
 *  destroyed (time-limit.ts). */
const TIME_LIMIT_GRACE_MS = 250;

/** A connection to the target database for a run's transaction, and its release, which acts once
 *  (the time limit may destroy the connection while the run still holds it). */
interface TargetConnection {
  client: pg.PoolClient;
  release: (destroy: Error | boolean) => void;
  released: () => boolean;
}

/** A connection to the target database; one that cannot be had is a batch-level failure. */
async function connectTarget(where: pg.Pool): Promise<TargetConnection> {
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

/** A run's work in the target under the kind's time limit (time-limit.ts): past it (and its
 *  grace), the handler's signal aborts and the connection it may still hold is destroyed (its
 *  transaction rolls back): never reused. `onLate` sees what the work resolves to after that. */
function underTimeLimit<T>(
  handler: ResolvedHandler,
  target: TargetConnection,
  work: (signal: AbortSignal) => Promise<T>,
  onLate?: (late: T) => void,
): Promise<T> {
  return withTimeLimit<T>(
    {
      what: `handler of ${handler.kind}`,
      limitMs: handler.config.timeLimitMs,
      graceMs: TIME_LIMIT_GRACE_MS,
      onExpire: () => target.release(new Error('handler time limit: connection destroyed')),
      ...(onLate ? { onLate } : {}),
    },
    work,
  );
}

/** The handler's call behind the kind's circuit breaker for this target, in its span (tc.handler).
 *  While the breaker is open cockatiel refuses the call (BrokenCircuitError) without running it;
 *  after halfOpenAfterMs it lets one trial call through. */
export function underBreaker<T>(breakers: CircuitBreakers, lease: Lease, target: string, items: number, call: () => Promise<T>): Promise<T> {
  return breakers.execute(lease.kind, target, () => withSpan('tc.handler', { 'tc.kind': lease.kind, 'tc.target': target, 'tc.handler.items': items }, call));
}

/** The handler on the claimed rows in the run's open transaction, split in savepoints to isolate
 *  the rows that fail (batch-isolation.ts); a batch-level failure or the aborted signal ends it. */
async function applyHandler(
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
async function abandon(target: TargetConnection, err: unknown): Promise<void> {
  const broken = isConnectionError(err);
  if (!broken && !target.released()) await target.client.query('ROLLBACK').catch(() => target.release(true));
  target.release(broken);
}

/** An error of the run in the target that is neither batch-level nor isolated by splitting (e.g.
 *  the marker insert failed): the batch's. */
function failedInTarget(lease: Lease, err: unknown): BatchFailure {
  return new BatchFailure(`shard ${lease.id} failed in the target: ${describeError(err)}`, undefined, { cause: err });
}

// Commit first.

/** What a run decided, in biz_ids: the record writes it. */
export type Decision = Marker & {
  fromMarker: boolean;
  /** The run handled every row the shard holds (record.ts RunResult). */
  ranAll?: boolean;
  /** The target database, whose marker is deleted after the record. */
  where: pg.Pool | undefined;
  /** The center's transaction holding the shard's row lock since before the target's commit
   *  (step 3): the record goes in it. */
  center?: CenterLock | undefined;
};

/** The run found its lease gone (or the shard split by a later run): nothing was committed. */
export type Lost = { lost: string };

/** Steps 2 and 3: the handler where it runs. Throws only batch-level failures. */
export async function applyCommitFirst(ctx: ExternalContext, lease: Lease, handler: ExternalHandler, claimed: Claimed, log: Logger): Promise<Decision | Lost> {
  const ext = handler.external;
  if (ext.via !== 'http') {
    const database = targetDatabase(ext, claimed.target);
    if (ext.via === 'sql' && !database) throw new BatchFailure(`shard ${lease.id} of ${lease.kind} has no target database`);
    const where = database ? ctx.databases.pool(database) : ctx.pool;
    return applyInTransaction(ctx.pool, where, lease, handler, claimed, log);
  }
  // The HTTP handler posts once, keeps its own time limit (http-handler.ts) and needs no client.
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

/**
 * The marker, the handler and the marker's outcome in one transaction on the target database,
 * committed only while the center holds the shard's row under this run's lease (step 3). The
 * whole run has the kind's time limit: past it the handler's signal aborts and its connection is
 * destroyed (the transaction rolls back; the handler is not called again on it), a batch-level
 * failure, except while the run waits for the marker (another run of the shard holds it: its
 * outcome is unknown) or commits: then the shard waits and its next run reads the marker.
 */
async function applyInTransaction(
  pool: pg.Pool,
  where: pg.Pool,
  lease: Lease,
  handler: ResolvedHandler,
  claimed: Claimed,
  log: Logger,
): Promise<Decision | Lost> {
  const target = await connectTarget(where);
  const { client, release, released } = target;
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
    const marker: Marker = { ...(await applyHandler(client, lease, handler, claimed.items, signal)), ran };
    await completeMarker(client, lease.id, marker);
    const lock = await lockLease(pool, lease);
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
    // A run that comes back after its limit holding the center's lock lets it go.
    return await underTimeLimit(handler, target, work, (late) => void ('center' in late ? late.center?.rollback() : undefined));
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
    await abandon(target, err);
    if (isBatchLevel(err)) throw err;
    throw failedInTarget(lease, err);
  } finally {
    release(false);
  }
}

// Two phases.

/** A two-phase run's business transaction, open after its handler (applyUncommitted). */
export interface UncommittedRun {
  client: pg.PoolClient;
  marker: Marker;
  release: (destroy: Error | boolean) => void;
}

/** A two-phase run found a marker of the shard in the target (or one held there): the
 *  commit-first run reads it. */
export class MarkerInTheWay extends BatchFailure {
  override name = 'MarkerInTheWay';
}

/**
 * Step 2 of a two-phase run: marker and handler in the business database, under the kind's time
 * limit, left open for the center's PREPARE. Throws batch-level failures, after rolling the
 * transaction back (a connection the limit cut is destroyed).
 */
export async function applyUncommitted(where: pg.Pool, lease: Lease, handler: ResolvedHandler, claimed: Claimed, idleMs: number): Promise<UncommittedRun> {
  const target = await connectTarget(where);
  const { client, release } = target;
  const limit = handler.config.timeLimitMs;
  const work = async (signal: AbortSignal): Promise<Marker> => {
    await client.query(`BEGIN; SET LOCAL statement_timeout = ${Math.floor(limit)}; SET LOCAL idle_in_transaction_session_timeout = ${idleMs}`);
    // The marker of a two-phase run is read for its lease token only (../two-phase.ts
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
    const outcome = await applyHandler(client, lease, handler, claimed.items, signal);
    if (signal.aborted) throw signal.reason;
    return { ...outcome, ran: claimed.bizIds };
  };
  try {
    const marker = await underTimeLimit(handler, target, work);
    return { client, marker, release };
  } catch (err) {
    await abandon(target, err);
    if (isBatchLevel(err) || err instanceof HandlerTimeoutError) throw err;
    throw failedInTarget(lease, err);
  }
}
