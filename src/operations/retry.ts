// Retry of failed timeouts, shared by `timeout-center retry` and the console: puts the selected
// failed timeouts back to pending (attempts 0, available now), so the next scan claims them.
// Several selectors narrow each other. A failed timeout whose business object already has a live
// timeout of the same kind is left alone (the one-live-per-object rule), and so is all but the
// newest failed one per object. Run it inside a transaction (it locks the matched rows).
import { sql, type ExpressionBuilder, type Kysely } from 'kysely';
import type { DbTimestamp } from '../db/schema.js';
import type { Database } from '../db/schema.js';
import { readLayout, type Layout } from '../db/citus-layout.js';

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
  let matched: number[];
  let ids: number[];
  if ((await layoutIn(db)).name === 'citus') ({ matched, ids } = await retryByBucket(db, opts));
  else ({ matched, ids } = await retryWhere(db, opts));
  const matchedIds = new Set(matched);
  const notFailed = (opts.id ?? []).filter((id) => !matchedIds.has(id));
  return { matched: matched.length, retried: ids.length, left: matched.length - ids.length, ids, notFailed, dryRun: Boolean(opts.dryRun) };
}

/** The layout of the database the transaction is in (readLayout, run in that transaction). */
function layoutIn(db: Kysely<Database>): Promise<Layout> {
  return readLayout({ query: <R extends object>(text: string) => sql.raw<R>(text).execute(db) });
}

/**
 * On a Citus layout (docs/scale.md "Citus: what runs"): Citus takes `FOR UPDATE` only in a query
 * on one shard, so the buckets that hold matching failed rows are read first (one multi-shard
 * read, no lock), then each bucket is retried as on one PostgreSQL with `bucket = $b` in every
 * part: three router queries per bucket, in bucket order (two retries lock in the same order), in
 * the caller's transaction (Citus commits it on every node it touched). A business object's
 * timeouts all sit in its bucket (bucket_of(biz_id)), so the one-live-per-object rule holds per
 * bucket. A scan is read as its shard ids first (shards is a table on the coordinator).
 */
async function retryByBucket(db: Kysely<Database>, opts: RetrySelector): Promise<{ matched: number[]; ids: number[] }> {
  let selector = opts;
  if (opts.scan !== undefined) {
    const ofScan = (await db.selectFrom('timeout_center.shards').select('id').where('scan_id', '=', opts.scan).execute()).map((r) => Number(r.id));
    const shard = opts.shard ? opts.shard.filter((id) => ofScan.includes(id)) : ofScan;
    if (shard.length === 0) return { matched: [], ids: [] };
    selector = { ...opts, scan: undefined, shard };
  }
  const found = await db
    .selectFrom('timeout_center.timeouts')
    .select(sql<number>`timeout_center.timeouts.bucket`.as('bucket'))
    .distinct()
    .where((eb) => selectedBy(eb, selector))
    .execute();
  const buckets = found.map((r) => Number(r.bucket)).sort((a, b) => a - b);
  const matched: number[] = [];
  const ids: number[] = [];
  for (const bucket of buckets) {
    const r = await retryWhere(db, selector, bucket);
    matched.push(...r.matched);
    ids.push(...r.ids);
  }
  return { matched: matched.sort((a, b) => a - b), ids: ids.sort((a, b) => a - b) };
}

function selectedBy(eb: ExpressionBuilder<Database, 'timeout_center.timeouts'>, opts: RetrySelector, bucket?: number) {
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
  if (bucket !== undefined) conds.push(eb(sql<number>`timeout_center.timeouts.bucket`, '=', bucket));
  return eb.and(conds);
}

/** Locks the matching failed rows and retries the eligible ones (all of them, or one bucket's). */
async function retryWhere(db: Kysely<Database>, opts: RetrySelector, bucket?: number): Promise<{ matched: number[]; ids: number[] }> {
  const selected = (eb: ExpressionBuilder<Database, 'timeout_center.timeouts'>) => selectedBy(eb, opts, bucket);
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
            .where('live.state', 'in', ['pending', 'dispatched'])
            .$if(bucket !== undefined, (q) => q.where(sql<number>`live.bucket`, '=', bucket!)),
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
      .$if(bucket !== undefined, (q) => q.where(sql<number>`bucket`, '=', bucket!))
      .returning('id')
      .execute();
    ids = updated.map((r) => Number(r.id)).sort((a, b) => a - b);
  }
  return { matched: matched.map((r) => Number(r.id)), ids };
}
