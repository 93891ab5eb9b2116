// Settle on read for every kind (issue 33), in the Node API (Settler) and behind the HTTP API.
//
// A kind whose SQL handler runs in the database holding its timeouts is settled by
// timeout_center.settle, in one round trip (settle.ts). A kind whose handler runs elsewhere (a
// business database by handler.database or a routing rule, an HTTP service, a code handler)
// commits its effect in another system than the timeout; there only the shard protocol makes the
// effect exactly once (claim committed first, the marker keyed by the shard in the business
// database, the business commit fenced by the shard's lease, the record under it). So the
// Settler runs such a timeout as a one-row shard through the workers' own external executor
// (worker/external-executor.ts), not with code of its own:
//   1. timeout_center.settle_run (sql/0023) takes the claim's row lock, checks due, pause and caps
//      like settle, and binds the row to a new one-row shard of a one-shard scan, leased to this
//      settler (held_ids, as an external claim holds rows), all in one committed transaction;
//   2. ExternalExecutor.run(lease, handler) runs it exactly as a worker runs a shard: marker,
//      handler, commit fenced by the lease, record; the lease is renewed while it runs;
//   3. the history row gets the settler's name (settled_by), and the answer says what happened.
// A worker's claim and this bind exclude each other on the row lock and held_ids (external_claim
// passes over a row held by another live shard, external_unhold gives back one it took late; the
// bind answers busy for a row a shard holds), so one shard alone ever applies the timeout. A
// settler that dies mid-way leaves a leased shard: the reaper requeues it after its lease and a
// worker runs it, reading the marker.
import { hostname } from 'node:os';
import type pg from 'pg';
import { pino, type Logger } from 'pino';
import { Alerter } from '../alerts/alerter.js';
import { databaseSilenceMs, type LoadedConfig } from '../config.js';
import { sql } from '../db/queries.js';
import { Metrics } from '../observability/metrics.js';
import { withSpan } from '../observability/tracing.js';
import { storeOf, TimeoutInputError, UnknownKindError, type Executor, type ScheduleInput } from '../schedule.js';
import { CircuitBreakers } from '../worker/breakers.js';
import { BusinessDatabases } from '../worker/business-db.js';
import { ExternalExecutor, type ExternalOutcome } from '../worker/external-executor.js';
import type { ShardHandler } from '../worker/handler-contract.js';
import { externalTarget, resolveHandlers, type ExternalTarget, type ResolvedHandler } from '../worker/handlers.js';
import type { Lease } from '../worker/lease.js';
import { Housekeeping } from '../worker/housekeeping.js';
import { checkSettleInput, settle, type SettleOptions, type SettleOutcome, type SettleResult, type SettleRow } from './settle.js';

export interface SettlerOptions {
  /** The config the workers run (kinds, handlers, business databases, breaker, leases). */
  config: LoadedConfig;
  /** The center's database. Settling a kind whose handler runs elsewhere commits here on its own
   *  (the bind must be visible to the run that follows): it never joins a caller's transaction. */
  pool: pg.Pool;
  /** Each store's database by name, for kinds stored beside their orders (settle() routes there). */
  stores?: Record<string, Executor> | undefined;
  logger?: Logger | undefined;
  /** Where the shard's counts go (default: metrics of its own). */
  metrics?: Metrics | undefined;
  /** The settler's name as a shard owner (shards.owner; default settle:<host>-<pid>). */
  id?: string | undefined;
}

type ExternalHandler = ResolvedHandler & { external: ExternalTarget };

/** settle_run's row: settle's, plus 'bound' and the one-row shard it bound the timeout to. */
interface BindRow extends Omit<SettleRow, 'outcome'> {
  outcome: SettleOutcome | 'bound';
  scan_id: string | null;
  lease_token: string | null;
}

/**
 * Settle on read for every kind of a config. `settle(kind, bizId)` applies the live timeout of
 * (kind, bizId) now, if it is due and pending, with the kind's own handler and guard, and answers
 * what happened (SETTLE_OUTCOMES). Code handlers come from their module, or registerHandler().
 * close() ends what it opened (business database pools, lease renewals), not `pool`.
 */
export class Settler {
  readonly id: string;
  private readonly registered = new Map<string, ShardHandler>();
  private readonly handlers = new Map<string, Promise<ExternalHandler>>();
  private readonly logger: Logger;
  private readonly leaseMs: number;
  private parts: Promise<{ executor: ExternalExecutor; housekeeping: Housekeeping; databases: BusinessDatabases }> | undefined;

  constructor(private readonly options: SettlerOptions) {
    this.id = options.id ?? `settle:${hostname()}-${process.pid}`;
    this.logger = (options.logger ?? pino({ level: 'silent' })).child({ settler: this.id });
    this.leaseMs = options.config.worker.leaseMs;
  }

  /** A TypeScript handler for a kind whose config says `handler: { type: code }` (as
   *  Worker.registerHandler); before the first settle of that kind. */
  registerHandler(kind: string, handler: ShardHandler): this {
    this.registered.set(kind, handler);
    this.handlers.delete(kind);
    return this;
  }

  /** Settles (kind, bizId) in the database that holds its timeout (the center's, or its store's). */
  async settle(kind: string, bizId: ScheduleInput['bizId'], options: SettleOptions = {}): Promise<SettleResult> {
    const kc = this.options.config.kinds[kind];
    let db: Executor = this.options.pool;
    if (kc?.store === 'beside') {
      const store = await storeOf(this.options.pool, kind, bizId);
      if (store !== undefined) {
        const found = this.options.stores?.[store];
        if (!found) throw new TimeoutInputError(`the timeout of ${kind} ${String(bizId)} belongs in store ${store}, and no database was given for it`);
        db = found;
      }
    }
    return this.settleIn(db, kind, bizId, options);
  }

  /**
   * Settles (kind, bizId) whose timeout lives in `db` (the HTTP API places it first). A kind whose
   * handler runs in that database: timeout_center.settle there, in db's transaction when db is
   * one. Any other: the one-row shard on the center's pool (its own transactions).
   */
  async settleIn(db: Executor, kind: string, bizId: ScheduleInput['bizId'], options: SettleOptions = {}): Promise<SettleResult> {
    const kc = this.options.config.kinds[kind];
    if (!kc || kc.store === 'beside' || !externalTarget(kc.handler)) return settle(db, kind, bizId, options);
    const { id, waitMs } = checkSettleInput(kind, bizId, options);
    return withSpan('tc.settle', { 'tc.kind': kind, 'tc.biz_id': id, 'tc.settle.path': 'shard' }, async (span) => {
      const result = await this.settleExternal(kind, id, waitMs);
      span.setAttribute('tc.settle.outcome', result.outcome);
      if (result.shardId !== undefined) span.setAttribute('tc.shard.id', result.shardId);
      return result;
    });
  }

  private async settleExternal(kind: string, bizId: string, waitMs: number): Promise<SettleResult> {
    let handler: ExternalHandler;
    try {
      handler = await this.handlerOf(kind);
    } catch (err) {
      // A code handler this process cannot load (no module, not registered here): nothing bound.
      return answer(kind, bizId, {
        outcome: 'unsupported',
        detail: `this process cannot run the handler of ${kind}: ${(err as Error).message}; the workers apply it`,
      });
    }
    // The heartbeat first: a shard bound to an owner the reaper does not know as live would be
    // taken over at its next reap (expire_gone.sql) while this runs it.
    const parts = await this.open();
    let row: BindRow | undefined;
    try {
      ({
        rows: [row],
      } = await this.options.pool.query<BindRow>(sql('settle/settle_bind', { kind, bizId, waitMs, owner: this.id, leaseMs: Math.floor(this.leaseMs) })));
    } catch (err) {
      const e = err as { code?: string; message?: string };
      if (e.code === '22023' && /^unknown timeout kind/.test(String(e.message))) throw new UnknownKindError(kind);
      throw err;
    }
    if (!row) throw new Error(`settle(${kind}, ${bizId}): timeout_center.settle_run answered nothing`);
    const timeoutId = row.timeout_id === null ? undefined : Number(row.timeout_id);
    const found = {
      timeoutId,
      state: row.state ?? undefined,
      dueAt: row.due_at ?? undefined,
      availableAt: row.available_at ?? undefined,
      result: row.result ?? undefined,
      shardId: row.shard_id === null ? undefined : Number(row.shard_id),
    };
    if (row.outcome !== 'bound') return answer(kind, bizId, { ...found, outcome: row.outcome, detail: row.detail });
    const lease: Lease = {
      id: Number(row.shard_id),
      scan_id: Number(row.scan_id),
      kind,
      lease_token: row.lease_token!,
      attempts: 1,
      claim_limit: 1,
      bucket: null,
      from_newest: false,
      suspect: false,
      claimAt: performance.now(),
    };
    const outcome = await this.runShard(parts, lease, handler);
    return this.outcomeOf(kind, bizId, timeoutId!, lease, outcome, found);
  }

  /** The workers' external executor on the bound shard, under its lease (renewed while it runs),
   *  in a shard span as a worker's run is (tc.shard). */
  private async runShard(parts: Awaited<NonNullable<Settler['parts']>>, lease: Lease, handler: ExternalHandler): Promise<ExternalOutcome> {
    const { executor, housekeeping } = parts;
    const kept = housekeeping.leaseKeeper.keep(lease.id, lease.lease_token);
    try {
      return await withSpan('tc.shard', { 'tc.shard.id': lease.id, 'tc.kind': lease.kind, 'tc.store': 'center', 'tc.scan.id': lease.scan_id }, () =>
        executor.run(lease, handler, this.logger.child({ shardId: lease.id, scanId: lease.scan_id, kind: lease.kind })),
      );
    } finally {
      kept.stop();
    }
  }

  private async outcomeOf(
    kind: string,
    bizId: string,
    timeoutId: number,
    lease: Lease,
    outcome: ExternalOutcome,
    found: Partial<SettleResult>,
  ): Promise<SettleResult> {
    const shardId = lease.id;
    if (outcome.status !== 'done') {
      // The shard is not finished by this run (its lease was lost, or the target cannot say yet
      // whether an earlier run committed): the workers finish it.
      return answer(kind, bizId, { ...found, outcome: 'busy', shardId, detail: `shard ${shardId} holds it: ${outcome.reason}` });
    }
    const { rows } = await this.options.pool.query<{
      state: string;
      result: 'applied' | 'skipped' | null;
      last_error: string | null;
      available_at: Date | null;
      settled_by: string | null;
    }>(sql('settle/settle_stamp', { timeoutId, shardId }));
    const now = rows[0];
    if (!now) return answer(kind, bizId, { ...found, outcome: 'already_final', shardId, detail: `shard ${shardId} ran; the timeout is purged` });
    const after = { ...found, shardId, state: now.state, availableAt: now.available_at ?? undefined, result: now.result ?? undefined };
    if (now.state === 'done' && now.result !== null)
      return answer(kind, bizId, { ...after, outcome: now.result, detail: `settled by ${now.settled_by ?? this.id} (shard ${shardId})` });
    if (now.state === 'failed')
      return answer(kind, bizId, { ...after, outcome: 'failed', detail: `the handler failed for good: ${now.last_error ?? 'no error recorded'}` });
    // Back to pending: a row-level failure with attempts left, or the whole batch failed (target
    // down, 5xx, time limit, breaker open): nothing applied, the scan retries it after its backoff.
    return answer(kind, bizId, {
      ...after,
      outcome: 'failed',
      detail: `the handler failed: ${now.last_error ?? 'no error recorded'}; nothing changed, the scan retries it`,
    });
  }

  private handlerOf(kind: string): Promise<ExternalHandler> {
    let handler = this.handlers.get(kind);
    if (!handler) {
      handler = resolveHandlers(this.options.config, [kind], this.registered, this.options.pool).then((m) => {
        const h = m.get(kind)!;
        if (!h.external) throw new Error(`kind ${kind} runs in the database that holds it`);
        return { ...h, external: h.external };
      });
      handler.catch(() => this.handlers.delete(kind));
      this.handlers.set(kind, handler);
    }
    return handler;
  }

  /**
   * The executor and what it needs, as a worker builds them (worker.ts), on the first settle of a
   * kind whose handler runs elsewhere. With them the settler's housekeeping, as a worker's: the
   * lease keeper, and a heartbeat in timeout_center.workers under its id (serving no kind, so no
   * shard is published to it and the map's "unserved kind" check is not fooled): without it the
   * reaper would take a shard of a settler it does not know as a gone worker's, and run it again
   * while the settler still runs it.
   */
  private open(): NonNullable<Settler['parts']> {
    this.parts ??= (async () => {
      const { config, pool } = this.options;
      const housekeeping = new Housekeeping({
        url: config.databaseUrl,
        label: ' (settle)',
        workerId: this.id,
        kinds: [],
        leaseMs: this.leaseMs,
        silentAfterMs: databaseSilenceMs(config),
        goneAfterMs: config.worker.goneAfterMs,
        logger: this.logger,
        failureMessage: 'PostgreSQL: settler heartbeat failed (timeout_center.workers not updated); retrying at the next beat',
      });
      await housekeeping.start();
      const metrics = this.options.metrics ?? new Metrics('settle');
      const sizes = Object.fromEntries(Object.entries(config.businessDatabases).map(([name, db]) => [name, db.poolSize]));
      const databases = new BusinessDatabases(config.businessDatabaseUrls, sizes, this.logger, Math.max(this.leaseMs, 10_000), databaseSilenceMs(config));
      const alerter = new Alerter(config.alerts, this.logger, metrics, this.id);
      const breakers = new CircuitBreakers(config.breaker, pool, this.id, metrics, alerter, this.logger);
      return { executor: new ExternalExecutor(pool, databases, breakers, metrics), housekeeping, databases };
    })();
    this.parts.catch(() => (this.parts = undefined));
    return this.parts;
  }

  /** Stops the heartbeat and lease renewals (the settler then counts as stopped) and closes the
   *  business database pools it opened (not `pool`). */
  async close(): Promise<void> {
    const opening = this.parts;
    this.parts = undefined;
    const parts = await opening?.catch(() => undefined);
    if (!parts) return;
    await parts.housekeeping.stop();
    await this.options.pool.query(sql('worker/worker_stopped', { workerId: this.id })).catch(() => {});
    await parts.databases.close();
  }
}

function answer(kind: string, bizId: string, r: Partial<SettleResult> & { outcome: SettleOutcome; detail: string }): SettleResult {
  return {
    kind,
    bizId,
    timeoutId: r.timeoutId,
    state: r.state,
    dueAt: r.dueAt,
    availableAt: r.availableAt,
    result: r.result,
    shardId: r.shardId,
    outcome: r.outcome,
    detail: r.detail,
  };
}
