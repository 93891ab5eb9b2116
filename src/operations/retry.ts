// Retry of failed timeouts, shared by `timeout-center retry` and the console: puts the selected
// failed timeouts back to pending (attempts 0, available now), so the next scan claims them.
// Several selectors narrow each other. A failed timeout whose business object already has a live
// timeout of the same kind is left alone (the one-live-per-object rule), and so is all but the
// newest failed one per object. Run it inside a transaction (it locks the matched rows).
import { sql, type ExpressionBuilder, type Kysely } from 'kysely';
import type { DbTimestamp } from '../db/schema.js';
import type { Database } from '../db/schema.js';

export interface RetrySelector {
  id?: number[] | undefined;
  kind?: string | undefined;
  scan?: number | undefined;
  shard?: number[] | undefined;
  /** Only failed timeouts whose last error contains this text (case-insensitive). */
  errorContains?: string | undefined;
  dryRun?: boolean | undefined;
}

/** True when the selector names at least one criterion (retry never means "everything" by accident). */
export function hasSelector(s: RetrySelector): boolean {
  return Boolean(s.id?.length || s.kind !== undefined || s.scan !== undefined || s.shard?.length || s.errorContains);
}

export interface RetryResult {
  matched: number;
  retried: number;
  left: number;
  ids: number[];
  notFailed: number[];
  dryRun: boolean;
}

export async function retryFailed(db: Kysely<Database>, opts: RetrySelector): Promise<RetryResult> {
  const selected = (eb: ExpressionBuilder<Database, 'timeout_center.timeouts'>) => {
    const conds = [eb('timeout_center.timeouts.state', '=', 'failed')];
    if (opts.id) conds.push(eb('timeout_center.timeouts.id', 'in', opts.id));
    if (opts.kind !== undefined) conds.push(eb('timeout_center.timeouts.kind', '=', opts.kind));
    if (opts.shard) conds.push(eb('timeout_center.timeouts.shard_id', 'in', opts.shard));
    if (opts.errorContains) {
      const pattern = `%${opts.errorContains.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
      conds.push(eb('timeout_center.timeouts.last_error', 'ilike', pattern));
    }
    if (opts.scan !== undefined) {
      conds.push(eb('timeout_center.timeouts.shard_id', 'in', eb.selectFrom('timeout_center.shards').select('id').where('scan_id', '=', opts.scan)));
    }
    return eb.and(conds);
  };
  const matched = await db.selectFrom('timeout_center.timeouts').select('id').where(selected).orderBy('id').forUpdate().execute();
  // The newest failed timeout per (kind, biz_id), unless that object has a live timeout already.
  const eligible = db
    .selectFrom('timeout_center.timeouts')
    .select('timeout_center.timeouts.id')
    .distinctOn(['timeout_center.timeouts.kind', 'timeout_center.timeouts.biz_id'])
    .where(selected)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('timeout_center.timeouts as live')
            .select(sql`1`.as('one'))
            .whereRef('live.kind', '=', 'timeout_center.timeouts.kind')
            .whereRef('live.biz_id', '=', 'timeout_center.timeouts.biz_id')
            .where('live.state', 'in', ['pending', 'dispatched']),
        ),
      ),
    )
    .orderBy('timeout_center.timeouts.kind')
    .orderBy('timeout_center.timeouts.biz_id')
    .orderBy('timeout_center.timeouts.id', 'desc');
  let ids: number[];
  if (opts.dryRun) {
    ids = (await eligible.execute()).map((r) => Number(r.id));
  } else {
    const updated = await db
      .updateTable('timeout_center.timeouts')
      .set({
        state: 'pending',
        attempts: 0,
        available_at: sql<DbTimestamp>`now()`,
        finished_at: null,
        result: null,
        shard_id: null,
      })
      .where('id', 'in', eligible)
      .where('state', '=', 'failed')
      .returning('id')
      .execute();
    ids = updated.map((r) => Number(r.id)).sort((a, b) => a - b);
  }
  const matchedIds = new Set(matched.map((r) => Number(r.id)));
  const notFailed = (opts.id ?? []).filter((id) => !matchedIds.has(id));
  return { matched: matched.length, retried: ids.length, left: matched.length - ids.length, ids, notFailed, dryRun: Boolean(opts.dryRun) };
}
