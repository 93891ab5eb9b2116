// The record, the last step of an external run in the center. Commit first (step 4): the run's
// outcome written under its lease (done / skipped / failed, the shard's counts), in the fenced
// transaction of step 3 when there is one (center-lock.ts), else in a transaction of its own,
// retried over a short loss of the center; in the form of each layout, recordPlain
// (external_record.sql, one statement) or recordInBucket (Citus: three), which center-forms.ts
// picks. Two phases (step 3 there): recordTwoPhase, in the run's open center transaction, before
// its PREPARE.
import type pg from 'pg';
import type { Logger } from 'pino';
import { isConnectionError, isRetryableConflict } from '../../db/pool.js';
import { sql } from '../../db/queries.js';
import type { Marker } from '../business-db.js';
import type { ResolvedHandler } from '../handlers.js';
import type { Lease } from '../lease.js';
import { latenessAt, type Lateness, type ShardCounts } from '../outcome.js';
import type { CenterLock } from './center-lock.js';

/** A batch-level failure: the record gives the whole shard back, to run again after the delay. */
export interface BatchRetry {
  retryInMs: number;
  error: string;
}

/** What the record writes: what a run decided, in biz_ids, or a batch retry. */
export type RunResult =
  | (Marker & {
      /** The run handled every row the shard holds (it wrote its own marker, naming every row its
       *  claim returned: the shard's held and dispatched rows, which nothing else changes while the
       *  lease is ours): the record is told so (ran NULL) instead of being sent the list again. */
      ranAll?: boolean;
      /** The center's transaction holding the shard's row lock since before the target's commit
       *  (step 3): the record goes in it. */
      center?: CenterLock | undefined;
    })
  | BatchRetry;

/** The shard's counts as recorded, and the lateness of the rows it wrote at the end of the record,
 *  after the target's commit (external_record.sql). */
export type Recorded = ShardCounts & { lateness: Lateness };

/** external_record.sql's inputs (the Citus form adds the shard's bucket). */
export type RecordInputs = {
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

/** The record in one layout's form, on the pool (a transaction of its own) or in the fenced
 *  transaction. Undefined when the lease is no longer ours. */
export type RecordForm = (db: pg.Pool | pg.PoolClient, lease: Lease, inputs: RecordInputs) => Promise<Recorded | undefined>;

/** What external_record.sql (or its Citus form's close) returns: at_ms, PostgreSQL's clock at the
 *  end of the record; the lateness per distinct due time measured at measured_ms (its start). */
type RecordRow = ShardCounts & { at_ms: number; measured_ms: number; lateness_ms: number[] | null; lateness_n: number[] | null };

function recordedFrom(row: RecordRow): Recorded {
  const { at_ms, measured_ms, lateness_ms, lateness_n, ...counts } = row;
  const measured = { seconds: (lateness_ms ?? []).map((ms) => ms / 1000), times: lateness_n ?? [] };
  return { ...counts, lateness: latenessAt(measured, Number(measured_ms), Number(at_ms)) };
}

/** external_record.sql's inputs for a run's result (or a batch-level failure). */
function recordInputs(lease: Lease, handler: ResolvedHandler, result: RunResult): RecordInputs {
  const batch = 'retryInMs' in result;
  const failed = batch ? [] : result.failed;
  return {
    shardId: lease.id,
    leaseToken: lease.lease_token,
    applied: batch ? [] : result.applied,
    failedIds: failed.map((f) => f.bizId),
    failedErrors: failed.map((f) => f.error),
    failedPermanent: failed.map((f) => f.permanent),
    maxAttempts: handler.config.maxAttempts,
    backoffMs: handler.config.backoffMs,
    batchRetryMs: batch ? Math.round(result.retryInMs) : null,
    batchError: batch ? result.error : null,
    ran: batch || result.ranAll ? null : (result.ran ?? null),
  };
}

/** Step 4: the run's result in the center, with `form` (center-forms.ts). Undefined when the lease
 *  is no longer ours. */
export function record(pool: pg.Pool, form: RecordForm, lease: Lease, handler: ResolvedHandler, result: RunResult, log: Logger): Promise<Recorded | undefined> {
  const inputs = recordInputs(lease, handler, result);
  return 'center' in result && result.center ? recordFenced(pool, form, result.center, lease, inputs, log) : recordWithRetry(pool, form, lease, inputs, log);
}

/** The record survives a short loss of the center's connection (deadlock, restart): the marker
 *  would make a re-run safe anyway, but it would wait for the lease to run out. */
async function recordWithRetry(pool: pg.Pool, form: RecordForm, lease: Lease, inputs: RecordInputs, log: Logger): Promise<Recorded | undefined> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await form(pool, lease, inputs);
    } catch (err) {
      if (attempt >= 4 || !(isConnectionError(err) || isRetryableConflict(err))) throw err;
      log.warn({ err, attempt }, 'recording the external shard failed on a transient error; retrying');
      await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
    }
  }
}

/** Step 4 in the transaction that fenced the commit. If the center fails there, the marker is
 *  committed: the record is retried on its own, as a re-run would. */
async function recordFenced(
  pool: pg.Pool,
  form: RecordForm,
  center: CenterLock,
  lease: Lease,
  inputs: RecordInputs,
  log: Logger,
): Promise<Recorded | undefined> {
  try {
    const recorded = await form(center.client, lease, inputs);
    await center.commit();
    return recorded;
  } catch (err) {
    await center.rollback();
    if (!(isConnectionError(err) || isRetryableConflict(err))) throw err;
    log.warn({ err }, 'recording the external shard failed on a transient error; retrying');
    return recordWithRetry(pool, form, lease, inputs, log);
  }
}

/** Step 4 on plain PostgreSQL: external_record.sql, one statement. */
export async function recordPlain(db: pg.Pool | pg.PoolClient, _lease: Lease, inputs: RecordInputs): Promise<Recorded | undefined> {
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
export async function recordInBucket(db: pg.Pool | pg.PoolClient, lease: Lease, inputs: RecordInputs): Promise<Recorded | undefined> {
  const bucket = lease.bucket;
  if (bucket === null) throw new Error(`shard ${lease.id} has no bucket: the Citus record runs only on the Citus layout (center-forms.ts)`);
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

/** Step 3 of a two-phase run, in its open center transaction before the PREPARE: the locked rows
 *  moved to done_timeouts, applied or skipped as the handler said, and the shard done
 *  (external_two_phase_move.sql). Undefined when the shard's row is not under this run's lease. */
export async function recordTwoPhase(
  center: pg.PoolClient,
  lease: Lease,
  ctids: string,
  applied: string[],
): Promise<(ShardCounts & { moved: number }) | undefined> {
  const { rows } = await center.query<ShardCounts & { moved: number }>(
    sql('worker/external_two_phase_move', { shardId: lease.id, leaseToken: lease.lease_token, ctids, applied }),
  );
  return rows[0];
}
