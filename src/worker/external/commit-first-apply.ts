// Steps 2 and 3 of a commit-first run: the handler's call where it runs. In a database, the marker, the handler and the marker's outcome go
// in one transaction there, committed only while the center holds the shard's row under this run's
// lease (center-lock.ts); an HTTP handler posts once. What it returns is what the record writes.
import type pg from 'pg';
import type { Logger } from 'pino';
import { isConnectionError, pgErrorCode } from '../../db/pool.js';
import { failpoint } from '../../failpoints.js';
import { completeMarker, insertMarker, isMarkerConflict, readMarker, type Marker } from '../business-db.js';
import { isBatchLevel, UnknownOutcomeError } from '../failures.js';
import { BatchFailure, HandlerTimeoutError, normalizeResult } from '../handler-contract.js';
import type { ResolvedHandler } from '../handlers.js';
import type { Lease } from '../lease.js';
import { withTimeLimit } from '../time-limit.js';
import { abandon, applyHandler, connectTarget, failedInTarget, TIME_LIMIT_GRACE_MS } from './business-run.js';
import { lockLease, type CenterLock } from './center-lock.js';
import { targetDatabase, type Claimed } from './claim.js';
import type { ExternalContext, ExternalHandler } from './context.js';

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
    return await withTimeLimit<Decision | Lost>(
      {
        what: `handler of ${handler.kind}`,
        limitMs: limit,
        graceMs: TIME_LIMIT_GRACE_MS,
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
    await abandon(target, err);
    if (isBatchLevel(err)) throw err;
    throw failedInTarget(lease, err);
  } finally {
    release(false);
  }
}
