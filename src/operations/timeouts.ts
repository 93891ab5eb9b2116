// One business object's timeouts (find by kind + business id), failed timeouts by filter, and the
// operator's cancel / reschedule / retry: the same cancel() and reschedule() the business API
// uses (src/schedule.ts) and the same retry as `timeout-center retry`, each audited in the
// transaction that makes the change.
import { InputError } from '../input-error.js';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import { recordAudit, type Queryable } from '../flow/kind-controls.js';
import { cancel, reschedule } from '../schedule.js';
import { queryable } from './queryable.js';
import { hasSelector, retryFailed, type RetryResult, type RetrySelector } from './retry.js';

export interface TimeoutHistoryRow {
  id: number;
  kind: string;
  bizId: string;
  state: string;
  dueAt: Date;
  availableAt: Date;
  attempts: number;
  shardId: number | null;
  scanId: number | null;
  result: string | null;
  lastError: string | null;
  createdAt: Date;
  finishedAt: Date | null;
  payload: unknown;
}

/** Every timeout of (kind, bizId), newest first: the live one (if any) and its predecessors. */
export async function timeoutHistory(db: Queryable, kind: string, bizId: string): Promise<TimeoutHistoryRow[]> {
  const { rows } = await db.query<TimeoutHistoryRow>(
    `SELECT t.id, t.kind, t.biz_id AS "bizId", t.state, t.due_at AS "dueAt", t.available_at AS "availableAt", t.attempts,
            t.shard_id AS "shardId", sh.scan_id AS "scanId", t.result, t.last_error AS "lastError",
            t.created_at AS "createdAt", t.finished_at AS "finishedAt", t.payload
       FROM timeout_center.all_timeouts t LEFT JOIN timeout_center.shards sh ON sh.id = t.shard_id
      WHERE t.kind = $1 AND t.biz_id = $2
      ORDER BY t.id DESC LIMIT 100`,
    [kind, bizId],
  );
  return rows;
}

export interface FailedFilter {
  kind?: string | undefined;
  scan?: number | undefined;
  errorContains?: string | undefined;
}

export interface FailedRow {
  timeoutId: number;
  kind: string;
  bizId: string;
  dueAt: Date;
  attempts: number;
  lastError: string | null;
  shardId: number | null;
  scanId: number | null;
  failedAt: Date | null;
}

/** Failed timeouts matching the filter (view failed_timeouts), newest first, and their total. */
export async function listFailed(db: Queryable, filter: FailedFilter, limit: number): Promise<{ total: number; rows: FailedRow[] }> {
  const where = `($1::text IS NULL OR kind = timeout_center.kind_or_null($1)) AND ($2::int8 IS NULL OR scan_id = $2)
    AND ($3::text IS NULL OR last_error ILIKE '%' || replace(replace(replace($3, '\\', '\\\\'), '%', '\\%'), '_', '\\_') || '%')`;
  const values = [filter.kind ?? null, filter.scan ?? null, filter.errorContains || null];
  const [rows, total] = await Promise.all([
    db.query<FailedRow>(
      `SELECT timeout_id AS "timeoutId", kind, biz_id AS "bizId", due_at AS "dueAt", attempts, last_error AS "lastError",
              shard_id AS "shardId", scan_id AS "scanId", failed_at AS "failedAt"
         FROM timeout_center.failed_timeouts WHERE ${where}
        ORDER BY failed_at DESC NULLS LAST, timeout_id DESC LIMIT $4`,
      [...values, limit],
    ),
    db.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.failed_timeouts WHERE ${where}`, values),
  ]);
  return { total: total.rows[0]!.n, rows: rows.rows };
}

/** Bad operator input (unknown kind, empty selector, ...): nothing was changed. */
export class OperationInputError extends InputError {
  override name = 'OperationInputError';
}

async function assertKnownKind(db: Kysely<Database>, kind: string): Promise<void> {
  const rows = await db.selectFrom('timeout_center.kinds').select('kind').orderBy('kind').execute();
  if (!rows.some((r) => r.kind === kind)) {
    throw new OperationInputError(`unknown kind ${JSON.stringify(kind)}; known kinds: ${rows.map((r) => r.kind).join(', ') || '(none)'}`);
  }
}

/** Retries the failed timeouts the selector names (never all of them by accident), audited. */
export async function retryAudited(db: Kysely<Database>, selector: RetrySelector, actor: string): Promise<RetryResult> {
  if (!hasSelector(selector)) throw new OperationInputError('retry needs a selection: timeout ids, a kind, a scan, a shard or an error text');
  if (selector.kind !== undefined) await assertKnownKind(db, selector.kind);
  return db.transaction().execute(async (trx) => {
    const result = await retryFailed(trx, selector);
    if (result.matched > 0) {
      await recordAudit(queryable(trx), {
        actor,
        action: 'retry',
        kind: selector.kind ?? null,
        target: describeSelector(selector),
        details: { selector: { ...selector, id: selector.id?.slice(0, 100) }, retried: result.retried, left: result.left, ids: result.ids.slice(0, 100) },
      });
    }
    return result;
  });
}

function describeSelector(s: RetrySelector): string {
  const parts: string[] = [];
  if (s.id?.length) parts.push(`ids ${s.id.slice(0, 10).join(',')}${s.id.length > 10 ? ',…' : ''}`);
  if (s.kind !== undefined) parts.push(`kind ${s.kind}`);
  if (s.scan !== undefined) parts.push(`scan ${s.scan}`);
  if (s.shard?.length) parts.push(`shards ${s.shard.join(',')}`);
  if (s.errorContains) parts.push(`error ~ ${JSON.stringify(s.errorContains)}`);
  return parts.join(', ');
}

/** Cancels the pending timeout of (kind, bizId); false when it came too late or there is none.
 *  Audited when it acts. */
export async function cancelAudited(db: Kysely<Database>, kind: string, bizId: string, actor: string): Promise<boolean> {
  return (await cancelManyAudited(db, kind, [bizId], actor)).cancelled.length === 1;
}

/** Cancels the pending timeouts of several business objects of one kind in one transaction, each
 *  cancel audited; says which were not cancelled (too late, final, or never scheduled). */
export async function cancelManyAudited(
  db: Kysely<Database>,
  kind: string,
  bizIds: string[],
  actor: string,
): Promise<{ cancelled: string[]; notLive: string[] }> {
  await assertKnownKind(db, kind);
  return db.transaction().execute(async (trx) => {
    const cancelled: string[] = [];
    const notLive: string[] = [];
    for (const bizId of [...new Set(bizIds)]) {
      const done = await cancel(trx, kind, bizId);
      if (done) await recordAudit(queryable(trx), { actor, action: 'cancel', kind, target: bizId });
      (done ? cancelled : notLive).push(bizId);
    }
    return { cancelled, notLive };
  });
}

/** Moves the pending timeout of (kind, bizId) to dueAt; false when none is pending. Audited. */
export async function rescheduleAudited(db: Kysely<Database>, kind: string, bizId: string, dueAt: Date, actor: string): Promise<boolean> {
  await assertKnownKind(db, kind);
  if (Number.isNaN(dueAt.getTime())) throw new OperationInputError('the new due time is not a valid date (use e.g. 2026-11-23T08:00:00Z)');
  return db.transaction().execute(async (trx) => {
    const moved = await reschedule(trx, kind, bizId, { dueAt });
    if (moved) await recordAudit(queryable(trx), { actor, action: 'reschedule', kind, target: bizId, details: { dueAt: dueAt.toISOString() } });
    return moved;
  });
}
