// What the HTTP API's routes do, without HTTP: each call goes to the database that holds the
// kind's timeouts (the center's, or for a kind stored beside its orders the store its rule picks
// for the biz_id: timeout_center.store_of, as StoreRouter does) and runs the business API's own
// SQL there (schedule.ts), so a call over HTTP does exactly what schedule() does.
import type { Config } from '../config.js';
import { sql } from '../db/queries.js';
import { activeTraceparent } from '../observability/tracing.js';
import { cancel, reschedule, schedule, storeOf, type PgQueryable } from '../schedule.js';
import { ApiError } from './errors.js';
import type { BatchRequest, ScheduleRequest, SettleAnswer, SettleOutcome, TimeoutView } from './schemas.js';

/** Settle-on-read (src/settle/ settle(db, kind, bizId)): applies one due, pending timeout now with
 *  its kind's handler and guard, in the database that holds it (the API hands it that database).
 *  Given to the API by the process; without one the route answers 501. */
export type SettleFn = (
  db: PgQueryable,
  kind: string,
  bizId: string,
) => Promise<
  | SettleOutcome
  | {
      outcome: SettleOutcome;
      detail?: string | undefined;
      state?: string | undefined;
      result?: 'applied' | 'skipped' | undefined;
      shardId?: number | undefined;
    }
>;

export interface ApiBackendOptions {
  center: PgQueryable;
  /** Each store's database by name (kinds stored beside their orders). */
  stores: Record<string, PgQueryable>;
  kinds: Config['kinds'];
  settle?: SettleFn | undefined;
}

interface Placed {
  db: PgQueryable;
  store: string | null;
}

type Due = { dueAt: Date } | { delayMs: number };

function due(input: { dueAt: string } | { delayMs: number }): Due {
  return 'dueAt' in input ? { dueAt: new Date(input.dueAt) } : { delayMs: input.delayMs };
}

const iso = (d: Date | string): string => new Date(d).toISOString();
const isoOrNull = (d: Date | string | null): string | null => (d === null ? null : iso(d));

/** An unknown kind reaching the database (the config this process read is older than the
 *  database's kinds, or the other way round): the enum cast refuses it, nothing is written. */
function translate(err: unknown, field: string): never {
  const e = err as { code?: string; message?: string; name?: string };
  if (e.name === 'UnknownKindError' || (e.code === '22P02' && /enum timeout_center\.kind\b/.test(String(e.message)))) {
    throw new ApiError(400, 'unknown_kind', 'unknown timeout kind: the center has no such kind (declare it under kinds: and run migrate)', field);
  }
  throw err;
}

export class ApiBackend {
  constructor(private readonly options: ApiBackendOptions) {}

  get settleAvailable(): boolean {
    return this.options.settle !== undefined;
  }

  /** A kind this process's config declares; otherwise 400 unknown_kind naming the field. */
  checkKind(kind: string, field: string): void {
    if (!Object.hasOwn(this.options.kinds, kind)) {
      throw new ApiError(400, 'unknown_kind', `unknown timeout kind "${kind}": declare it under kinds: in the config and run migrate`, field);
    }
  }

  private beside(kind: string): boolean {
    return this.options.kinds[kind]?.store === 'beside';
  }

  private storeDb(store: string, what: string): PgQueryable {
    const db = this.options.stores[store];
    if (!db)
      throw new ApiError(503, 'unavailable', `${what} belongs in store ${store}, and this API process has no database for it (businessDatabases.${store})`);
    return db;
  }

  async place(kind: string, bizId: string): Promise<Placed> {
    if (!this.beside(kind)) return { db: this.options.center, store: null };
    let store: string | undefined;
    try {
      store = await storeOf(this.options.center, kind, bizId);
    } catch (err) {
      if ((err as Error).name === 'TimeoutInputError') throw new ApiError(400, 'unroutable', (err as Error).message, 'bizId');
      throw err;
    }
    return store === undefined ? { db: this.options.center, store: null } : { db: this.storeDb(store, `the timeout of ${kind} ${bizId}`), store };
  }

  async schedule(input: ScheduleRequest) {
    const { db } = await this.place(input.kind, input.bizId);
    try {
      const t = await schedule(db, { kind: input.kind, bizId: input.bizId, ...due(input), payload: input.payload });
      return { id: t.id, kind: t.kind, bizId: t.bizId, dueAt: iso(t.dueAt), created: t.created };
    } catch (err) {
      return translate(err, 'kind');
    }
  }

  /** One statement, so one transaction: every timeout is written or none. A batch goes to one
   *  database; one whose timeouts belong in different stores is refused (split it by store).
   *  One pass over the batch: each kind checked at its first row, a (kind, bizId) given twice
   *  refused at its second, the statement's arrays built. */
  async scheduleBatch(body: BatchRequest) {
    const items = body.timeouts;
    const n = items.length;
    const kinds = new Array<string>(n);
    const bizIds = new Array<string>(n);
    const dueMs = new Array<number | null>(n);
    const delaysMs = new Array<number | null>(n);
    const payloads = new Array<[unknown] | null>(n);
    const seen = new Map<string, Map<string, number>>();
    for (let i = 0; i < n; i += 1) {
      const t = items[i]!;
      const bizId = t.bizId;
      let ids = seen.get(t.kind);
      if (ids === undefined) {
        this.checkKind(t.kind, `timeouts.${i}.kind`);
        ids = new Map();
        seen.set(t.kind, ids);
      }
      const first = ids.get(bizId);
      if (first !== undefined) {
        throw new ApiError(
          400,
          'duplicate_in_batch',
          `timeouts ${first} and ${i} are both ${t.kind} ${t.bizId}: a batch may name a timeout once`,
          `timeouts.${i}.bizId`,
        );
      }
      ids.set(bizId, i);
      kinds[i] = t.kind;
      bizIds[i] = bizId;
      if ('dueAt' in t) {
        dueMs[i] = Date.parse(t.dueAt);
        delaysMs[i] = null;
      } else {
        dueMs[i] = null;
        delaysMs[i] = t.delayMs;
      }
      payloads[i] = t.payload === undefined ? null : [t.payload];
    }
    const db = await this.batchDatabase(body, seen);
    const { text, values } = sql('api/schedule_batch', {
      kinds: JSON.stringify(kinds),
      bizIds: JSON.stringify(bizIds),
      dueMs: JSON.stringify(dueMs),
      delaysMs: JSON.stringify(delaysMs),
      payloads: JSON.stringify(payloads),
      // The request's span (request-spans.ts) is active here: its context goes with every row, as
      // schedule() keeps it for one (none when tracing is off: NULL, nothing stored).
      traceParent: activeTraceparent() ?? null,
    });
    let rows: { kind: string; biz_id: string; id: string | number; due_ms: string | number; created: boolean; written: boolean }[];
    try {
      rows = (await db.query(text, values)).rows as typeof rows;
    } catch (err) {
      return translate(err, 'timeouts');
    }
    // One row per timeout sent, paired with it by (kind, bizId), answered in the order sent (a
    // timeout both written and found dispatched: the written row, see schedule_batch.sql). A
    // batch's due times are mostly one instant (one now() plus one delay): each distinct one is
    // formatted once.
    const timeouts = new Array<{ id: number; kind: string; bizId: string; dueAt: string; created: boolean }>(n);
    const written = new Uint8Array(n);
    let created = 0;
    let answered = 0;
    let lastMs = Number.NaN;
    let lastIso = '';
    for (const r of rows) {
      const i = seen.get(r.kind)?.get(r.biz_id);
      if (i === undefined) throw new Error(`schedule_batch answered ${r.kind} ${r.biz_id}, which was not sent`);
      if (timeouts[i] !== undefined) {
        if (!r.written) continue;
        if (written[i] === 1) throw new Error(`schedule_batch wrote ${r.kind} ${r.biz_id} twice`);
      } else answered += 1;
      const ms = Number(r.due_ms);
      if (ms !== lastMs) {
        lastMs = ms;
        lastIso = new Date(ms).toISOString();
      }
      if (r.written) written[i] = 1;
      if (r.created) created += 1;
      timeouts[i] = { id: Number(r.id), kind: kinds[i]!, bizId: items[i]!.bizId, dueAt: lastIso, created: r.created };
    }
    // A timeout neither written nor found dispatched (it went final between the statement's
    // snapshot and its insert, and was not written again): the answer would be incomplete.
    if (answered !== n) throw new Error(`schedule_batch answered ${answered} of ${n} timeouts: retry the batch (it is idempotent)`);
    return { transaction: 'all-or-nothing' as const, count: n, created, timeouts };
  }

  private async batchDatabase(body: BatchRequest, byKind: Map<string, unknown>): Promise<PgQueryable> {
    if (![...byKind.keys()].some((kind) => this.beside(kind))) return this.options.center;
    const beside = body.timeouts.map((t, i) => [t, i] as const).filter(([t]) => this.beside(t.kind));
    const { text, values } = sql('api/stores_of', { kinds: beside.map(([t]) => t.kind), bizIds: beside.map(([t]) => t.bizId) });
    const rows = (await this.options.center.query(text, values)).rows as { ord: number; store: string | null }[];
    const stores = new Set<string | null>(beside.length < body.timeouts.length ? [null] : []);
    for (const r of rows) {
      const [t, i] = beside[r.ord - 1]!;
      if (r.store === '-unroutable')
        throw new ApiError(400, 'unroutable', `the store rule of kind ${t.kind} cannot place biz_id ${t.bizId}`, `timeouts.${i}.bizId`);
      stores.add(r.store);
    }
    if (stores.size > 1) {
      throw new ApiError(
        400,
        'batch_spans_stores',
        `this batch's timeouts belong in ${stores.size} databases (${[...stores].map((s) => s ?? 'center').join(', ')}); a batch is one transaction in one database: send one batch per store`,
        'timeouts',
      );
    }
    const [store] = stores;
    return store === null || store === undefined ? this.options.center : this.storeDb(store, 'this batch');
  }

  async cancel(kind: string, bizId: string): Promise<{ cancelled: boolean }> {
    const { db } = await this.place(kind, bizId);
    return { cancelled: await cancel(db, kind, bizId) };
  }

  async reschedule(kind: string, bizId: string, input: { dueAt: string } | { delayMs: number }): Promise<{ rescheduled: boolean }> {
    const { db } = await this.place(kind, bizId);
    return { rescheduled: await reschedule(db, kind, bizId, due(input)) };
  }

  async get(kind: string, bizId: string): Promise<TimeoutView> {
    const { db, store } = await this.place(kind, bizId);
    const { text, values } = sql('api/get_timeout', { kind, bizId });
    const row = (await db.query(text, values)).rows[0] as
      | {
          id: string;
          kind: string;
          biz_id: string;
          state: TimeoutView['state'];
          result: string | null;
          due_at: Date;
          attempts: number;
          last_error: string | null;
          shard_id: string | null;
          scan_id: string | null;
          created_at: Date;
          finished_at: Date | null;
        }
      | undefined;
    if (!row) throw new ApiError(404, 'not_found', `no timeout of ${kind} ${bizId} (never scheduled, or purged by retention)`);
    return {
      id: Number(row.id),
      kind: row.kind,
      bizId: row.biz_id,
      state: row.state,
      outcome: row.result,
      dueAt: iso(row.due_at),
      attempts: row.attempts,
      lastError: row.last_error,
      shardId: row.shard_id === null ? null : Number(row.shard_id),
      scanId: row.scan_id === null ? null : Number(row.scan_id),
      store,
      createdAt: iso(row.created_at),
      finishedAt: isoOrNull(row.finished_at),
    };
  }

  /** The center's database answers within 2 s, or 503 unavailable. */
  async ping(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ApiError(503, 'unavailable', "the center's database did not answer within 2 s")), 2000);
    });
    try {
      await Promise.race([this.options.center.query('SELECT 1'), late]);
    } catch (err) {
      if (err instanceof ApiError) throw err;
      throw new ApiError(503, 'unavailable', `the center's database does not answer: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  async settle(kind: string, bizId: string): Promise<SettleAnswer> {
    const settle = this.options.settle;
    if (!settle) throw new ApiError(501, 'not_implemented', 'settle is not available in this process (no settle function was given to the API)');
    const { db } = await this.place(kind, bizId);
    let result: Awaited<ReturnType<typeof settle>>;
    try {
      result = await settle(db, kind, bizId);
    } catch (err) {
      // A database where settle on read is not built (a Citus center: sql/citus/settle.sql) says
      // so with feature_not_supported and changes nothing.
      const e = err as { code?: string; message?: string };
      if (e.code === '0A000') throw new ApiError(501, 'not_implemented', String(e.message));
      throw err;
    }
    const found = typeof result === 'string' ? { outcome: result } : result;
    // Settle looks for a live timeout only (the history has no index by biz_id); the API tells a
    // final one from none, as GET does, so a client needs no second call.
    if (found.outcome === 'not_found') {
      return (
        (await this.finalTimeout(db, kind, bizId)) ?? {
          outcome: 'not_found',
          detail: `no timeout of ${kind} ${bizId}: never scheduled, or purged by retention`,
        }
      );
    }
    const answer: SettleAnswer = { outcome: found.outcome };
    if (found.detail !== undefined) answer.detail = found.detail;
    if (found.state !== undefined) answer.state = found.state;
    if (found.result !== undefined) answer.result = found.result;
    if (found.shardId !== undefined) answer.shardId = found.shardId;
    return answer;
  }

  /** The latest final timeout of (kind, bizId) in db as settle answers it (already_final), or
   *  undefined when there is none: never scheduled, or purged by retention. */
  private async finalTimeout(db: PgQueryable, kind: string, bizId: string): Promise<SettleAnswer | undefined> {
    const { text, values } = sql('api/latest_final', { kind, bizId });
    const row = (await db.query(text, values)).rows[0] as
      | {
          state: string;
          result: 'applied' | 'skipped' | null;
          shard_id: string | null;
          settled_by: string | null;
          last_error: string | null;
          finished_at: Date | null;
        }
      | undefined;
    if (!row) return undefined;
    const when = row.finished_at === null ? '' : ` at ${iso(row.finished_at)}`;
    const how =
      row.state === 'done'
        ? row.settled_by !== null
          ? `settled by ${row.settled_by}${row.shard_id === null ? '' : ` (shard ${row.shard_id})`}`
          : `applied by shard ${row.shard_id}`
        : row.state === 'failed'
          ? `failed for good: ${row.last_error ?? 'no error recorded'}`
          : 'cancelled';
    const answer: SettleAnswer = {
      outcome: 'already_final',
      state: row.state,
      detail: `final already: ${row.state}${row.result ? ` (${row.result})` : ''}, ${how}${when}`,
    };
    if (row.result !== null) answer.result = row.result;
    if (row.shard_id !== null) answer.shardId = Number(row.shard_id);
    return answer;
  }
}
