// The business-facing API: schedule, cancel and reschedule a timeout inside the caller's own
// transaction (a pg client / pool, or a kysely instance or transaction). Plain SQL does the same
// from any language; these functions are that SQL plus input checks and clear errors.
import { InputError } from './input-error.js';
import { CompiledQuery, type Kysely, type Transaction } from 'kysely';
import { sql, type BoundStatement } from './db/queries.js';
import { activeTraceparent, parseTraceparent } from './observability/tracing.js';
import { codePointLength, isStorable, NOT_STORABLE, payloadProblem } from './storable-text.js';

/** Anything that can run a parameterised query: pg.Client, pg.PoolClient, pg.Pool. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any database type is fine
export type Executor = PgQueryable | Kysely<any> | Transaction<any>;

export class TimeoutInputError extends InputError {
  override name = 'TimeoutInputError';
}
export class UnknownKindError extends TimeoutInputError {
  override name = 'UnknownKindError';
  constructor(readonly kind: string) {
    super(`unknown timeout kind "${kind}": declare it under kinds: in the timeout-center config and run \`timeout-center migrate\` (nothing was written)`);
  }
}

export interface ScheduleInput {
  kind: string;
  bizId: string | number | bigint;
  /** Absolute due time. Give exactly one of dueAt / delayMs. */
  dueAt?: Date;
  /** Due this long after PostgreSQL's now() (the database clock, not this node's). */
  delayMs?: number;
  payload?: unknown;
  /** The W3C traceparent of the request that schedules it (`00-<trace id>-<span id>-<flags>`),
   *  kept with the timeout so that the shard applying it links its span to it (docs/tracing.md).
   *  Default: the active OpenTelemetry span's, if any; null: none. */
  traceparent?: string | null;
}

export interface ScheduledTimeout {
  id: number;
  kind: string;
  bizId: string;
  dueAt: Date;
  /** false when a live timeout for (kind, bizId) existed and was moved to the new due time. */
  created: boolean;
}

async function run<R>(db: Executor, { text, values }: BoundStatement): Promise<R[]> {
  if ('executeQuery' in db && typeof db.executeQuery === 'function') {
    const result = await db.executeQuery(CompiledQuery.raw(text, values));
    return result.rows as R[];
  }
  const result = await (db as PgQueryable).query(text, values);
  return result.rows as R[];
}

// The database's layout, read once per pool, client or Kysely (src/db/citus-layout.ts): on Citus the
// statements name the row's bucket (src/schedule/queries/citus/), so each routes to one node.
const citusOf = new WeakMap<object, Promise<boolean>>();
function isCitus(db: Executor): Promise<boolean> {
  let found = citusOf.get(db);
  if (!found) {
    found = run<{ citus: boolean }>(db, { text: "SELECT to_regclass('timeout_center.layout') IS NOT NULL AS citus", values: [] }).then(
      (r) => r[0]?.citus === true,
    );
    citusOf.set(db, found);
    found.catch(() => citusOf.delete(db));
  }
  return found;
}

/** The biz_id as text: 1 to 200 characters (code points, as the table's CHECK counts them) that
 *  PostgreSQL can store (src/storable-text.ts). */
export function bizIdText(bizId: ScheduleInput['bizId']): string {
  const text = typeof bizId === 'string' ? bizId : String(bizId);
  if (text.length === 0 || (text.length > 200 && codePointLength(text) > 200))
    throw new TimeoutInputError(`bizId must be 1 to 200 characters, got ${JSON.stringify(text)}`);
  if (!isStorable(text)) throw new TimeoutInputError(`bizId ${NOT_STORABLE}: ${JSON.stringify(text)}`);
  return text;
}

function checkKind(kind: unknown): string {
  if (typeof kind !== 'string' || kind.length === 0) throw new TimeoutInputError('kind is required (e.g. "order.unpaid")');
  if (!isStorable(kind)) throw new TimeoutInputError(`kind ${NOT_STORABLE}: ${JSON.stringify(kind)}`);
  return kind;
}

/** The payload as the jsonb text the statements take, or null; refused when PostgreSQL could not
 *  store it (src/storable-text.ts). */
function payloadText(payload: unknown): string | null {
  if (payload === undefined) return null;
  const problem = payloadProblem(payload);
  if (problem) throw new TimeoutInputError(`payload${problem.path.map((p) => `.${p}`).join('')} ${problem.message}`);
  return JSON.stringify(payload);
}

function dueArgs(input: { dueAt?: Date | undefined; delayMs?: number | undefined }): [Date | null, number | null] {
  const hasDue = input.dueAt !== undefined;
  const hasDelay = input.delayMs !== undefined;
  if (hasDue === hasDelay) throw new TimeoutInputError('give exactly one of dueAt (a Date) or delayMs (milliseconds from now)');
  if (hasDue) {
    if (!(input.dueAt instanceof Date) || Number.isNaN(input.dueAt.getTime())) {
      throw new TimeoutInputError(`dueAt must be a valid Date, got ${String(input.dueAt)}`);
    }
    return [input.dueAt, null];
  }
  if (!Number.isFinite(input.delayMs) || (input.delayMs as number) < 0) {
    throw new TimeoutInputError(`delayMs must be a finite number >= 0, got ${String(input.delayMs)}`);
  }
  return [null, input.delayMs as number];
}

function traceParentOf(given: string | null | undefined): string | null {
  if (given === null) return null;
  if (given === undefined) return activeTraceparent() ?? null;
  if (typeof given !== 'string' || !parseTraceparent(given)) {
    throw new TimeoutInputError(`traceparent must be a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>), got ${JSON.stringify(given)}`);
  }
  return given.trim();
}

function translate(err: unknown, kind: string): never {
  const e = err as { code?: string; constraint?: string };
  // A kind no config declared is no label of the enum timeout_center.kind (sql/0017).
  if (e.code === '22P02' && /enum timeout_center\.kind\b/.test(String((err as Error).message))) throw new UnknownKindError(kind);
  throw err;
}

/**
 * Registers a timeout. Idempotent per live (kind, bizId): scheduling again while the timeout is
 * still pending moves it to the new due time and payload. A pending row a shard is applying right
 * now is row-locked by that shard's transaction: this waits for its commit (then the timeout is
 * done and a new one is written). A row pinned to a shard's re-run (dispatched, after a worker
 * died) is left alone and returned.
 */
export async function schedule(db: Executor, input: ScheduleInput): Promise<ScheduledTimeout> {
  const kind = checkKind(input.kind);
  const bizId = bizIdText(input.bizId);
  const [dueAt, delayMs] = dueArgs(input);
  const payload = payloadText(input.payload);
  const traceParent = traceParentOf(input.traceparent);
  try {
    const inputs = { kind, bizId, dueAt, delayMs, payload };
    // The Citus form keeps no trace context (docs/scale.md "Citus: what runs").
    const statement = (await isCitus(db)) ? sql('citus/schedule/schedule', inputs) : sql('schedule/schedule', { ...inputs, traceParent });
    const rows = await run<{ id: number; due_at: Date; created: boolean }>(db, statement);
    const row = rows[0];
    if (!row) throw new Error(`schedule(${kind}, ${bizId}): no row written or found; retry`);
    return { id: Number(row.id), kind, bizId, dueAt: new Date(row.due_at), created: row.created };
  } catch (err) {
    return translate(err, kind);
  }
}

/** Cancels the pending timeout of (kind, bizId); a cancelled timeout never acts. Returns false
 *  when it came too late or there was nothing to cancel: the timeout is in a worker's hands
 *  (dispatched: its shard may be closing the order right now, in another database), already
 *  applied, failed or cancelled, or was never scheduled. On false the payment's guarded UPDATE
 *  (`... AND status = 'unpaid'`) decides. A timeout a shard is applying in this database is
 *  row-locked: this waits for that commit, then returns false. Call it before touching the order. */
export async function cancel(db: Executor, kind: string, bizId: ScheduleInput['bizId']): Promise<boolean> {
  const inputs = { kind: checkKind(kind), bizId: bizIdText(bizId) };
  const rows = await run(db, (await isCitus(db)) ? sql('citus/schedule/cancel', inputs) : sql('schedule/cancel', inputs));
  return rows.length > 0;
}

/** Moves a pending timeout to a new due time. Returns false when no pending timeout exists (one
 *  pinned to a shard's re-run cannot move; one a shard is applying now is locked, and this
 *  waits for that commit, then finds it done). */
export async function reschedule(db: Executor, kind: string, bizId: ScheduleInput['bizId'], due: { dueAt: Date } | { delayMs: number }): Promise<boolean> {
  const [dueAt, delayMs] = dueArgs(due);
  const inputs = { kind: checkKind(kind), bizId: bizIdText(bizId), dueAt, delayMs };
  const rows = await run(db, (await isCitus(db)) ? sql('citus/schedule/reschedule', inputs) : sql('schedule/reschedule', inputs));
  return rows.length > 0;
}

/** The store (a name under businessDatabases) that holds (kind, bizId)'s timeout, or undefined for
 *  the center's database; any database of the fleet answers. Throws when the kind's store rule
 *  cannot place the id (modulo and range take integer ids). See StoreRouter to act there. */
export async function storeOf(db: Executor, kind: string, bizId: ScheduleInput['bizId']): Promise<string | undefined> {
  const id = bizIdText(bizId);
  const rows = await run<{ store: string | null }>(db, sql('schedule/store_of', { kind: checkKind(kind), bizId: id }));
  const store = rows[0]?.store ?? undefined;
  if (store === '-unroutable') throw new TimeoutInputError(`the store rule of kind ${kind} cannot place biz_id ${id} (modulo and range take integer ids)`);
  return store;
}

/** Runs one bound statement on any Executor (pg or kysely): for the other business functions
 *  (settle/settle.ts). */
export { run as runStatement };
