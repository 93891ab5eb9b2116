// Settle on read (issue 33): a reader that meets an overdue, still-open order applies its timeout
// now, with the kind's own handler and guard and the claim's row lock, instead of waiting for the
// scan. One round trip: timeout_center.settle (sql/0021) does the work in the database, so a
// service on the same database gets the same from SQL; this adds input checks, typed answers and a
// span. Supported: kinds whose SQL handler runs in the database holding their timeouts (the center,
// or a store beside the orders: route with StoreRouter.settle). Other handlers (a business
// database the center does not own, HTTP, code) answer 'unsupported' here: there the effect
// commits in another system than the timeout, and only the shard's protocol (claim committed
// first, a marker keyed by the shard, the record under the shard's lease) makes it exactly once.
// The Settler (settler.ts) settles those as a one-row shard run through that protocol.
import { sql } from '../db/queries.js';
import { withSpan } from '../observability/tracing.js';
import { bizIdText, runStatement, TimeoutInputError, UnknownKindError, type Executor, type ScheduleInput } from '../schedule.js';
import { isStorable, NOT_STORABLE } from '../storable-text.js';

/** What settle did, each described in sql/0021_settle.sql and docs/operations.md "Settle on read":
 *  applied (the handler changed the object; done), skipped (its guard refused, e.g. already paid;
 *  done), not_due, paused, limited (the kind at its max running shards or its rate over the last
 *  second), busy (a worker holds it: locked past waitMs, or dispatched to a shard; or the handler
 *  waited > 100 ms on a payer's lock of the object), already_final (it went final while settle
 *  waited), not_found (no live timeout), unsupported (here: the handler runs outside this database,
 *  business database, HTTP, code: use the Settler; there: a code handler it does not have), failed (the handler raised; rolled back, left for the scan).
 *  Only applied and skipped change anything. For schemas (the HTTP API's zod enum). */
export const SETTLE_OUTCOMES = ['applied', 'skipped', 'not_due', 'paused', 'limited', 'busy', 'already_final', 'not_found', 'unsupported', 'failed'] as const;
export type SettleOutcome = (typeof SETTLE_OUTCOMES)[number];

export interface SettleResult {
  outcome: SettleOutcome;
  kind: string;
  bizId: string;
  /** The timeout's id, when one was found. */
  timeoutId: number | undefined;
  /** Its state after settle: pending, dispatched, done, cancelled, failed. */
  state: string | undefined;
  dueAt: Date | undefined;
  availableAt: Date | undefined;
  /** applied / skipped, once done. */
  result: 'applied' | 'skipped' | undefined;
  /** The shard that holds or applied it (busy, already_final). */
  shardId: number | undefined;
  /** Why, in words. */
  detail: string;
}

export interface SettleOptions {
  /** How long to wait for a worker's shard transaction (or a payer's cancel) that holds the row
   *  right now, before answering 'busy' (default 1000 ms; 0: not at all). Whoever holds it
   *  commits within its shard's time: waiting usually turns 'busy' into 'already_final'. */
  waitMs?: number;
}

/** A row of timeout_center.settle (and, with the bind's extra columns, of settle_run). */
export interface SettleRow {
  outcome: SettleOutcome;
  timeout_id: string | null;
  state: string | null;
  due_at: Date | null;
  available_at: Date | null;
  result: 'applied' | 'skipped' | null;
  shard_id: string | null;
  detail: string;
}

/** settle()'s input checks, shared with the Settler: the biz_id as text and the wait. */
export function checkSettleInput(kind: string, bizId: ScheduleInput['bizId'], options: SettleOptions): { id: string; waitMs: number } {
  if (typeof kind !== 'string' || kind.length === 0) throw new TimeoutInputError('kind is required (e.g. "order.unpaid")');
  if (!isStorable(kind)) throw new TimeoutInputError(`kind ${NOT_STORABLE}: ${JSON.stringify(kind)}`);
  const id = bizIdText(bizId);
  const waitMs = options.waitMs ?? 1000;
  if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > 600_000)
    throw new TimeoutInputError(`waitMs must be an integer from 0 to 600000, got ${String(waitMs)}`);
  return { id, waitMs };
}

/**
 * Applies the live timeout of (kind, bizId) now, if it is due and pending, with the kind's handler
 * and guard, and says what happened. Never a second effect beside a worker: it takes the claim's
 * row lock. Runs in `db`'s transaction when db is one (the timeout row, and for a capped kind the
 * kind's row, stay locked until it ends: settle first, before touching the order); on a pool it
 * commits at once.
 */
export async function settle(db: Executor, kind: string, bizId: ScheduleInput['bizId'], options: SettleOptions = {}): Promise<SettleResult> {
  const { id, waitMs } = checkSettleInput(kind, bizId, options);
  return withSpan('tc.settle', { 'tc.kind': kind, 'tc.biz_id': id }, async (span) => {
    let rows: SettleRow[];
    try {
      rows = await runStatement<SettleRow>(db, sql('settle/settle', { kind, bizId: id, waitMs }));
    } catch (err) {
      const e = err as { code?: string; message?: string };
      if (e.code === '22023' && /^unknown timeout kind/.test(String(e.message))) throw new UnknownKindError(kind);
      throw err;
    }
    const row = rows[0];
    if (!row) throw new Error(`settle(${kind}, ${id}): timeout_center.settle answered nothing`);
    span.setAttribute('tc.settle.outcome', row.outcome);
    return {
      outcome: row.outcome,
      kind,
      bizId: id,
      timeoutId: row.timeout_id === null ? undefined : Number(row.timeout_id),
      state: row.state ?? undefined,
      dueAt: row.due_at ?? undefined,
      availableAt: row.available_at ?? undefined,
      result: row.result ?? undefined,
      shardId: row.shard_id === null ? undefined : Number(row.shard_id),
      detail: row.detail,
    };
  });
}
