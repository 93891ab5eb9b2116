// Runs one shard: take its lease, then in one transaction lock it, claim up to its limit of due
// timeouts of its kind, run the kind's handler on the whole batch, and write each timeout once
// with its outcome (done ones move to done_timeouts; failed ones stay) and the shard's counts; the
// caller ACKs after commit. A re-run after a worker died pins its rows first (pin.sql).
// A failing batch is split in halves (each try inside a savepoint) until the failing ids are
// isolated, so one bad row never holds back the rest of its shard.
import type pg from 'pg';
import type { Logger } from 'pino';
import { isConnectionError, isRetryableConflict, withTransaction } from '../db/pool.js';
import { sql, statementValues } from '../db/queries.js';
import { AS_TEXT, parseInt8Array, parseIntArray, parseJsonbArray, parseMillisArray, parseTextArray } from '../db/pg-text.js';
import { failpoint } from '../failpoints.js';
import type { Metrics } from '../observability/metrics.js';
import { applyIsolating, type RowFailure } from './batch-isolation.js';
import { bindLiterals } from './bind-literals.js';
import type { ExternalExecutor } from './external-executor.js';
import type { ShardItem } from './handler-contract.js';
import { HANDLER_LOCK_TIMEOUT_MS, type ResolvedHandler } from './handlers.js';
import { pinRows, splitPinned } from './isolate.js';
import { handBack, holdShard, releaseLease, takeLease, untilClaimAt, type Lease } from './lease.js';
import type { KeptLease, LeaseKeeper } from './lease-keeper.js';
import { CLOCK_AFTER_COMMIT, latenessAt, recordOutcome, type Lateness, type ShardCounts, type ShardOutcome } from './outcome.js';
import type { BatchSqlHandler, BatchStatement } from './sql-handler.js';
import { withTimeLimit } from './time-limit.js';
import { addLinksToActive, setActiveAttributes, startSpan, withSpan, SpanKind, type Span } from '../observability/tracing.js';

/** Leases tried for one delivery while its row is found locked by another statement (each after
 *  hold_shard.sql waited for that lock): such locks last a statement, so a second try takes it. */
const LEASE_ATTEMPTS = 3;

class LeaseLostError extends Error {
  override name = 'LeaseLostError';
}

/** What claim.sql returns, as PostgreSQL's text (arrays as literals such as {1,2,3}); ids,
 *  biz_ids and payloads only in the plain form. */
interface Taken {
  n: string;
  ids: string | null;
  biz_ids: string | null;
  payloads: string | null;
  skipped: string;
  lateness_ms: string;
  /** Batch form: how many rows each lateness_ms stands for (one per distinct due time); plain
   *  form: null (one lateness per row). */
  lateness_n: string | null;
  /** When lateness_ms was measured: the claim statement's start, epoch ms (PostgreSQL's clock). */
  measured_ms: string;
  /** Up to 32 schedule trace contexts of the claimed rows (sql/0022), or null; absent from the
   *  Citus form (citus/worker/claim.sql keeps no trace context). */
  trace_parents?: string | null;
}

interface Outcome {
  /** Timeouts the shard claimed. */
  n: number;
  /** Of those, marked skipped by claim.sql itself (batch form). */
  skippedMarked: number;
  /** Timeout ids claimed by the plain form, which finish.sql writes (the batch form moved its own). */
  claimed: string[];
  /** Timeout ids finish.sql must mark skipped (plain form). */
  skipped: string[];
  failed: string[];
  failures: RowFailure[];
  /** Measured at the claim statement's start (`measuredMs`); moved to the commit once it is done. */
  lateness: Lateness;
  measuredMs: number;
  traceParents: string[];
}

export interface ShardExecutorOptions {
  pool: pg.Pool;
  handlers: Map<string, ResolvedHandler>;
  workerId: string;
  leaseMs: number;
  metrics: Metrics;
  logger: Logger;
  /** Renews the lease of each running shard (lease-keeper.ts); none: the lease is never extended. */
  leaseKeeper?: LeaseKeeper | undefined;
  /** Runs the kinds whose handler lives outside this database (business databases, HTTP, code). */
  external?: ExternalExecutor | undefined;
  /** The store whose database `pool` is (default: the center's), for the metrics. */
  store?: string | undefined;
}

export class ShardExecutor {
  private readonly pool: pg.Pool;
  private readonly handlers: Map<string, ResolvedHandler>;
  private readonly leaseMs: number;
  private readonly metrics: Metrics;
  private readonly logger: Logger;

  private readonly store: string;
  private givenUp = false;

  constructor(private readonly options: ShardExecutorOptions) {
    ({ pool: this.pool, handlers: this.handlers, leaseMs: this.leaseMs, metrics: this.metrics, logger: this.logger } = options);
    this.store = options.store ?? 'center';
  }

  /** A drain past its bound is ending this worker's sessions to release its shards: a shard
   *  transaction that fails from now on is not tried again (a retry would take the shard's row
   *  lock back before release_running.sql, which skips locked shards, gets to it). */
  giveUp(): void {
    this.givenUp = true;
  }

  /** Runs one shard under its span (tc.shard; docs/tracing.md): lease, claim, handler, record. */
  run(shardId: number): Promise<ShardOutcome> {
    return withSpan(
      'tc.shard',
      { 'tc.shard.id': shardId, 'tc.store': this.store },
      async (span) => {
        const outcome = await this.runShard(shardId);
        span.setAttribute('tc.shard.status', outcome.status);
        if (outcome.status === 'done')
          span.setAttributes({ 'tc.shard.done': outcome.done, 'tc.shard.skipped': outcome.skipped, 'tc.shard.failed': outcome.failed });
        return outcome;
      },
      { kind: SpanKind.CONSUMER },
    );
  }

  private async runShard(shardId: number): Promise<ShardOutcome> {
    const leaseStarted = performance.now();
    const take = () => withSpan('tc.lease', { 'tc.shard.id': shardId }, () => takeLease(this.pool, shardId, this.options.workerId, this.leaseMs));
    let lease = await take();
    // Rare path (one more round trip): tell flow control's hold from a duplicate delivery, and
    // both from a row another statement had locked for a moment (the coordinator's floor refresh,
    // its reap: take_lease skips locked rows, and hold_shard waits for the lock to pass).
    for (let attempt = 1; !lease; attempt += 1) {
      const why = await holdShard(this.pool, shardId);
      if (!why) return { status: 'not-ours', reason: 'shard is final or leased by another worker' };
      if (why.held) {
        this.metrics.shards.inc({ store: this.store, kind: why.kind, outcome: 'held' });
        return { status: 'held', reason: `kind ${why.kind} is paused or at its max running shards` };
      }
      if (attempt === LEASE_ATTEMPTS) {
        // Locked at every attempt: leave it for the coordinator to publish again within a second.
        await handBack(this.pool, [shardId]);
        return { status: 'not-ours', reason: `shard was locked by another statement at ${LEASE_ATTEMPTS} lease attempts; handed back` };
      }
      lease = await take();
    }
    const leaseMs = performance.now() - leaseStarted;
    const handler = this.handlers.get(lease.kind);
    if (!handler) {
      // This worker does not serve the kind (kinds filter): leave it for one that does.
      await releaseLease(this.pool, lease);
      this.metrics.shards.inc({ store: this.store, kind: lease.kind, outcome: 'released' });
      return { status: 'not-ours', reason: `kind ${lease.kind} is not served by this worker` };
    }
    const log = this.logger.child({ shardId, scanId: lease.scan_id, kind: lease.kind });
    setActiveAttributes({ 'tc.kind': lease.kind, 'tc.scan.id': lease.scan_id, 'tc.shard.attempt': lease.attempts });
    // Leased ahead of its rows' due instant: the slot and its lease are ready, so the claim starts
    // at the instant itself. (A claim never takes a row not yet due; waiting is what makes it take
    // all of them.) The batch form waits inside its transaction, its claim ready (runTransaction).
    if (!handler.batch || handler.external) await untilClaimAt(lease);
    await failpoint('worker.after-lease');
    const { external, leaseKeeper } = this.options;
    if (handler.external && external) {
      // The external path renews its lease too: a slow target must not lose a running shard.
      const keptExternal = leaseKeeper?.keep(lease.id, lease.lease_token);
      try {
        return await external.run(lease, { ...handler, external: handler.external }, log);
      } finally {
        keptExternal?.stop();
      }
    }
    if (lease.attempts > 1 && lease.suspect) {
      // An earlier run of this shard died after it began its claim: fix its rows first, so that
      // the rows that may be killing workers stay with this shard and fail with it after
      // maxAttempts. (A run that died before its claim, e.g. frozen or killed right after its
      // lease, held no row: this run is an ordinary one.)
      const pin = { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, leaseToken: lease.lease_token, bucket: lease.bucket };
      const pinned = await withTransaction(this.pool, (client) => pinRows(client, pin));
      log.warn({ attempt: lease.attempts, pinned }, 'shard runs again after its worker died; its rows are pinned to it');
      // Rather than apply them all again (and die again, if one of them kills workers), hand them
      // to two new shards, half each (isolate.ts).
      const split = await splitPinned(this.pool, lease.id, lease.scan_id, lease.lease_token, lease.bucket);
      if (split.length > 0) {
        log.warn({ attempt: lease.attempts, into: split }, 'shard split in two to isolate a row that may kill workers');
        this.metrics.shards.inc({ store: this.store, kind: lease.kind, outcome: 'split' });
        return { status: 'done', done: 0, skipped: 0, failed: 0, retried: 0 };
      }
    }
    const kept = leaseKeeper?.keep(lease.id, lease.lease_token);
    try {
      return await this.runLeased(lease, handler, log, leaseMs, kept);
    } finally {
      kept?.stop();
    }
  }

  private async runLeased(lease: Lease, handler: ResolvedHandler, log: Logger, leaseMs: number, kept: KeptLease | undefined): Promise<ShardOutcome> {
    const started = performance.now();
    // Transient errors (deadlock, connection lost, PostgreSQL restarting) retry the whole
    // transaction while the lease lasts; the lease token stays valid unless the reaper took it.
    const deadline = Date.now() + this.leaseMs * 0.8;
    for (let attempt = 1; ; attempt += 1) {
      try {
        const { lateness, ...counts } = await this.runTransaction(lease, handler, log, leaseMs, kept);
        recordOutcome(this.metrics, { store: this.store, kind: lease.kind }, counts, performance.now() - started, lateness);
        return { status: 'done', ...counts };
      } catch (err) {
        if (err instanceof LeaseLostError) return { status: 'not-ours', reason: err.message };
        const transient = isRetryableConflict(err) || isConnectionError(err);
        if (!transient || this.givenUp || Date.now() + 1000 > deadline) throw err;
        const delay = Math.min(2000, 50 * 2 ** attempt);
        log.warn({ err, attempt, delay }, 'shard transaction failed on a transient error; retrying');
        await new Promise((r) => setTimeout(r, delay));
        if (this.givenUp) throw err;
      }
    }
  }

  /**
   * The shard transaction. Its statements go in as few round trips as the protocol allows, since a
   * round trip costs the most when PostgreSQL's cores are busy with the other shards' claims: on
   * the batch form's path, three (BEGIN + lock + savepoint; claim; release + finish + COMMIT).
   * Statements without bind parameters there are multi-statement strings with literal values.
   */
  private async runTransaction(
    lease: Lease,
    handler: ResolvedHandler,
    log: Logger,
    leaseMs: number,
    kept?: KeptLease,
  ): Promise<ShardCounts & { lateness: Lateness }> {
    // Where a shard's time goes (debug log): lease, claim + handler, finish, commit.
    const t = { begin: performance.now(), applied: 0, finished: 0 };
    const client = await this.pool.connect();
    let broken = false;
    let open = false;
    let record: Span | undefined;
    let result: ShardCounts & { lateness: Lateness };
    try {
      const batch = handler.batch;
      const savepoint = batch
        ? `; SAVEPOINT tc_batch; SET LOCAL statement_timeout = ${Math.floor(batch.timeLimitMs)}; SET LOCAL lock_timeout = ${HANDLER_LOCK_TIMEOUT_MS}`
        : '';
      open = true;
      // In the same round trip: first, in a transaction of its own (no wait for the WAL flush),
      // the mark that this run began its claim (mark_claim.sql: a re-run after a death makes its
      // rows suspects of killing workers only then); then the shard transaction.
      const mark = bindLiterals(sql('worker/mark_claim', { shardId: lease.id, leaseToken: lease.lease_token }));
      const begun = (await client.query(
        `BEGIN; SET LOCAL synchronous_commit = off; ${mark}; COMMIT; ` +
          `BEGIN; ${bindLiterals(sql('worker/lock_shard', { shardId: lease.id, leaseToken: lease.lease_token }))}${savepoint}`,
      )) as unknown as pg.QueryResult[];
      if (begun[5]!.rowCount === 0) throw new LeaseLostError(`lease on shard ${lease.id} was lost (the reaper requeued it)`);
      if (batch && lease.claimAt > performance.now()) {
        // Leased ahead of the due instant: plan the claim now (EXPLAIN executes nothing), so
        // that this session has the tables, indexes and statistics it reads loaded when the
        // instant comes, then wait for it. A first claim on a new session otherwise spends
        // 15-30 ms on that at the instant. (Not the colocated Citus form: its claim is one call
        // that the worker node plans, not this session.)
        if (!batch.colocated) await client.query({ text: `EXPLAIN ${claimStatement(batch, lease).sql}`, values: batchClaimValues(batch, lease) });
        await untilClaimAt(lease);
        t.begin = performance.now();
      }
      // One write per row. A SQL handler runs inside the claim statement (batch form), which
      // moves each row to done_timeouts with its result; anything else, or a batch that failed,
      // gets the claimed rows locked (as PostgreSQL array text), runs apart, and finish.sql
      // writes each row's outcome.
      const fast = batch ? await withSpan('tc.claim', { 'tc.claim.form': 'batch' }, () => this.claimAndApply(client, batch, lease, log)) : undefined;
      const outcome = fast ?? (await withSpan('tc.claim', { 'tc.claim.form': 'plain' }, () => this.claimThenApply(client, handler, lease)));
      // The shard's span links to the schedule requests of what it applies (sql/0022).
      addLinksToActive(outcome.traceParents);
      t.applied = performance.now();
      record = startSpan('tc.record');
      await failpoint('worker.before-commit');
      if (kept?.lost) throw new LeaseLostError(`lease on shard ${lease.id} was lost while it ran (found by its renewal)`);
      const finishInputs = {
        shardId: lease.id,
        skipped: outcome.skipped,
        failed: outcome.failed,
        errors: outcome.failures.map((f) => f.error),
        permanent: outcome.failures.map((f) => f.permanent),
        maxAttempts: handler.config.maxAttempts,
        backoffMs: handler.config.backoffMs,
        claimed: outcome.n,
        skippedMarked: outcome.skippedMarked,
        claimedIds: outcome.claimed,
      };
      const finish = lease.bucket === null ? sql('worker/finish', finishInputs) : sql('citus/worker/finish', { ...finishInputs, bucket: lease.bucket });
      // Citus, batch form: the claim moved every row; only the shard's row is left to close, on the
      // coordinator (finish.sql's timeouts parts would be round trips to a worker node for nothing).
      const close =
        lease.bucket === null ? finish : sql('citus/worker/close_shard', { shardId: lease.id, claimed: outcome.n, skippedMarked: outcome.skippedMarked });
      let done: { done: number; skipped: number; failed: number; retried: number };
      // Lateness is taken after the commit, on PostgreSQL's clock: a SELECT sent behind the COMMIT
      // in its round trip (outcome.ts, CLOCK_AFTER_COMMIT) reads it.
      let committed: pg.QueryResult<{ at_ms: string }>;
      if (fast) {
        // The batch moved every row already: finish only closes the shard (empty arrays).
        const closing = (await client.query(
          `RELEASE SAVEPOINT tc_batch; SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; ${bindLiterals(close)}; COMMIT; ${CLOCK_AFTER_COMMIT}`,
        )) as unknown as pg.QueryResult[];
        open = false;
        done = closing[3]!.rows[0] as typeof done;
        committed = closing[5] as pg.QueryResult<{ at_ms: string }>;
        t.finished = t.applied;
      } else {
        done = (await client.query<typeof done>(finish)).rows[0]!;
        t.finished = performance.now();
        const closing = (await client.query(`COMMIT; ${CLOCK_AFTER_COMMIT}`)) as unknown as pg.QueryResult[];
        open = false;
        committed = closing[1] as pg.QueryResult<{ at_ms: string }>;
      }
      result = {
        done: Number(done.done),
        skipped: Number(done.skipped),
        failed: Number(done.failed),
        retried: Number(done.retried),
        lateness: latenessAt(outcome.lateness, outcome.measuredMs, Number(committed.rows[0]!.at_ms)),
      };
      record.end();
    } catch (err) {
      record?.end();
      broken = isConnectionError(err);
      if (open && !broken) await client.query('ROLLBACK').catch(() => (broken = true));
      throw err;
    } finally {
      client.release(broken);
    }
    const ms = (x: number) => Math.round(x * 10) / 10;
    const phases = {
      leaseMs: ms(leaseMs),
      claimApplyMs: ms(t.applied - t.begin),
      finishMs: ms(t.finished - t.applied),
      commitMs: ms(performance.now() - t.finished),
    };
    await failpoint('worker.after-commit');
    if (result.failed > 0 || result.retried > 0) log.warn({ ...result, lateness: undefined }, 'shard finished with failing timeouts');
    else log.debug({ done: result.done, skipped: result.skipped, ...phases }, 'shard done');
    return result;
  }

  /**
   * Claim and SQL handler in one statement (sql-handler.ts), inside the savepoint the transaction
   * opened with the handler's limits: PostgreSQL returns only the count, the lateness and the
   * skipped ids. A named statement, so PostgreSQL plans it once per connection. On a handler
   * error the savepoint undoes claim and handler alike (and the limits), and the shard falls back
   * to claimThenApply, which isolates the failing ids.
   */
  private async claimAndApply(client: pg.PoolClient, batch: BatchSqlHandler, lease: Lease, log: Logger): Promise<Outcome | undefined> {
    try {
      const claim = claimStatement(batch, lease);
      const { rows } = await client.query<Taken>({
        name: claim.name,
        text: claim.sql,
        values: batchClaimValues(batch, lease),
        types: AS_TEXT,
      });
      const taken = rows[0]!;
      const lateness = { seconds: parseMillisArray(taken.lateness_ms), times: taken.lateness_n === null ? undefined : parseIntArray(taken.lateness_n) };
      return {
        n: Number(taken.n),
        skippedMarked: Number(taken.skipped),
        claimed: [],
        skipped: [],
        failed: [],
        failures: [],
        lateness,
        measuredMs: Number(taken.measured_ms),
        traceParents: traceParentsOf(taken),
      };
    } catch (err) {
      // The connection or the transaction itself is gone: no row is to blame, retry the shard.
      if (isConnectionError(err) || isRetryableConflict(err)) throw err;
      await client.query('ROLLBACK TO SAVEPOINT tc_batch; RELEASE SAVEPOINT tc_batch');
      log.debug({ err }, 'batch handler failed; claiming again to isolate the failing ids');
      return undefined;
    }
  }

  /** Claims the rows, then runs the handler on them (one value per timeout), splitting in halves
   *  on failure. */
  private async claimThenApply(client: pg.PoolClient, handler: ResolvedHandler, lease: Lease): Promise<Outcome> {
    const { rows } = await client.query<Taken>({
      ...(lease.bucket === null
        ? sql('worker/claim', { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, batch: false })
        : sql('citus/worker/claim', { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, batch: false, bucket: lease.bucket })),
      types: AS_TEXT,
    });
    const taken = rows[0]!;
    const out: Outcome = {
      n: Number(taken.n),
      skippedMarked: 0,
      claimed: [],
      skipped: [],
      failed: [],
      failures: [],
      lateness: { seconds: [] },
      measuredMs: Number(taken.measured_ms),
      traceParents: traceParentsOf(taken),
    };
    if (out.n === 0) return out;
    const ids = parseInt8Array(taken.ids!);
    out.claimed = ids;
    const bizIds = parseTextArray(taken.biz_ids!);
    const payloads = parseJsonbArray(taken.payloads!);
    const lateness = parseMillisArray(taken.lateness_ms);
    const items: ShardItem[] = bizIds.map((bizId, i) => ({ bizId, payload: payloads[i] }));
    const split = await applyIsolating(
      client,
      items,
      (batch) => this.callHandler(client, handler, lease, batch),
      // The connection or the transaction itself is gone: no row is to blame, retry the shard.
      (err) => isConnectionError(err) || isRetryableConflict(err),
    );
    // Ids the handler did not return were skipped (nothing to change, e.g. already paid).
    bizIds.forEach((bizId, i) => {
      const failure = split.failed.get(bizId);
      if (failure) {
        out.failed.push(ids[i]!);
        out.failures.push(failure);
      } else {
        out.lateness.seconds.push(lateness[i]!);
        if (!split.applied.has(bizId)) out.skipped.push(ids[i]!);
      }
    });
    return out;
  }

  /** The handler on one batch, under the kind's time limit (its signal aborts after it). */
  private callHandler(client: pg.PoolClient, handler: ResolvedHandler, lease: Lease, items: ShardItem[]) {
    return withSpan('tc.handler', { 'tc.kind': handler.kind, 'tc.handler.items': items.length }, () =>
      withTimeLimit({ what: `handler of ${handler.kind}`, limitMs: handler.config.timeLimitMs, graceMs: 50 }, (signal) =>
        handler.run(items, { kind: handler.kind, shardId: lease.id, client, signal, bucket: lease.bucket ?? undefined }),
      ),
    );
  }
}

/** The inputs of the batch form of claim.sql (the statement with the handler inside), or of
 *  claim_colocated.sql (Citus, the handler's tables colocated with timeouts). */
function batchClaimValues(batch: BatchSqlHandler, lease: Lease): unknown[] {
  const inputs = { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, batch: true };
  if (lease.bucket === null) return statementValues('worker/claim', inputs);
  if (!batch.colocated) return statementValues('citus/worker/claim', { ...inputs, bucket: lease.bucket });
  return statementValues('citus/worker/claim_colocated', {
    bucket: lease.bucket,
    shardId: lease.id,
    kind: lease.kind,
    claimLimit: lease.claim_limit,
    handler: batch.colocated.handler,
    lockTimeoutMs: HANDLER_LOCK_TIMEOUT_MS,
  });
}

/** The claimed rows' schedule trace contexts (claim.sql's trace_parents; none: empty). */
function traceParentsOf(taken: Taken): string[] {
  const parents = taken.trace_parents;
  return parents === undefined || parents === null || parents === '{}' ? [] : parseTextArray(parents);
}

/** The batch statement a shard claims with: newest first for every other shard of a flood mapped
 *  ahead, oldest first otherwise. */
function claimStatement(batch: BatchSqlHandler, lease: Lease): BatchStatement {
  return lease.from_newest ? batch.newest : batch;
}
