// Retention: removes done and cancelled timeouts, reduced scans (with their shards) and forgotten
// workers once they are older than the configured ages. The history (done_timeouts) is partitioned
// by day (sql/0050, 0051): each run creates the partitions of the next days and drops the days
// wholly older than the age, a cost that does not grow with the rows or the table
// (docs/vacuum-horizon.md); the rows older than the age in the partitions that cannot be dropped
// yet (the table from before the partitioning, the DEFAULT partition) are deleted by batch. Every
// other purge is batches of one short DELETE through an index (timeouts_purgeable for cancelled
// ones; done_timeouts' BRIN on finished_at where the history is not partitioned: the Citus layout),
// so a purge never holds a long lock. Failed timeouts are kept: operators retry them.
//
// The leading coordinator runs it every retention.intervalMs (Retention below, one of its
// leader-gated duties); operators can run the same purge with `timeout-center purge`.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { RetentionConfig } from '../config.js';
import { sql } from '../db/queries.js';
import { layoutOf } from '../db/citus-layout.js';
import type { Metrics } from '../observability/metrics.js';
import { BaseService } from '../service.js';

export interface PurgeOptions {
  /** Done/cancelled timeouts finished longer ago than this are deleted. */
  doneAfterMs: number;
  /** Reduced scans older than this are deleted with their shards; also stopped workers. */
  scansAfterMs: number;
  batchSize: number;
  scanBatchSize: number;
}

export interface PurgeResult {
  /** Rows deleted (by batch). */
  timeouts: number;
  /** History partitions dropped whole, and their rows as the planner estimated them. */
  partitionsDropped: number;
  droppedRows: number;
  /** History partitions created ahead. */
  partitionsCreated: number;
  /** Changes that met a lock (or a DEFAULT partition holding rows of that day): the next run tries again. */
  partitionsSkipped: number;
  scans: number;
  workers: number;
  batches: number;
  ms: number;
}

export interface PurgeHooks {
  /** Checked between batches: return true to stop early (process shutting down, leadership lost). */
  shouldStop?: () => boolean;
  onBatch?: (table: 'timeouts' | 'scans', deleted: number) => void;
  /** A history partition created, dropped or skipped (rows: the dropped one's estimate). */
  onPartition?: (action: PartitionAction, partition: string, rows: number, detail: string | null) => void;
}

export type PartitionAction = 'created' | 'dropped' | 'skipped';

/** Days after today (UTC) whose history partitions each run makes sure exist: a run that fails,
 *  or a coordinator that is down, for less than this leaves no day without its partition. */
export const HISTORY_DAYS_AHEAD = 3;
/** How long a partition's attach or detach may wait for its locks: DETACH takes ACCESS EXCLUSIVE
 *  on the history, and while it waits the hot path's inserts queue behind it. The next run retries. */
export const HISTORY_LOCK_TIMEOUT_MS = 100;

/** Deletes old rows batch by batch until none is left (or shouldStop says so). */
export async function purge(pool: pg.Pool, options: PurgeOptions, hooks: PurgeHooks = {}): Promise<PurgeResult> {
  const started = performance.now();
  const result: PurgeResult = {
    timeouts: 0,
    partitionsDropped: 0,
    droppedRows: 0,
    partitionsCreated: 0,
    partitionsSkipped: 0,
    scans: 0,
    workers: 0,
    batches: 0,
    ms: 0,
  };
  const stop = hooks.shouldStop ?? (() => false);
  // Timeouts first (the done ones' history, then the cancelled ones): nothing references them.
  // Then scans, whose shards cascade.
  // On the Citus layout the cancelled ones go bucket by bucket (citus/retention/purge_timeouts.sql).
  const layout = await layoutOf(pool);
  const partitioned =
    layout.name === 'plain' && (await pool.query<{ partitioned: boolean }>(sql('retention/history_partitioned'))).rows[0]?.partitioned === true;
  if (partitioned && !stop()) await rotate(pool, options, result, hooks);
  const batches = [
    () =>
      partitioned
        ? sql('retention/purge_history', { ageMs: options.doneAfterMs, batchSize: options.batchSize })
        : sql('retention/purge_done_timeouts', { ageMs: options.doneAfterMs, batchSize: options.batchSize }),
    ...(layout.name === 'citus'
      ? layout.buckets.map((bucket) => () => sql('citus/retention/purge_timeouts', { ageMs: options.doneAfterMs, batchSize: options.batchSize, bucket }))
      : [() => sql('retention/purge_timeouts', { ageMs: options.doneAfterMs, batchSize: options.batchSize })]),
  ];
  for (const batch of batches) {
    for (;;) {
      if (stop()) break;
      const res = await pool.query<{ n?: number }>(batch());
      // purge_history.sql returns its count as a row; the DELETEs as their row count.
      const n = res.rows[0]?.n ?? res.rowCount ?? 0;
      result.batches += 1;
      result.timeouts += n;
      if (n > 0) hooks.onBatch?.('timeouts', n);
      if (n < options.batchSize) break;
    }
  }
  for (;;) {
    if (stop()) break;
    const purgeScans = { ageMs: options.scansAfterMs, batchSize: options.scanBatchSize };
    const { rowCount } = await pool.query(layout.name === 'citus' ? sql('citus/retention/purge_scans', purgeScans) : sql('retention/purge_scans', purgeScans));
    const n = rowCount ?? 0;
    result.batches += 1;
    result.scans += n;
    if (n > 0) hooks.onBatch?.('scans', n);
    if (n < options.scanBatchSize) break;
  }
  if (!stop()) {
    const { rowCount } = await pool.query(sql('retention/purge_workers', { ageMs: options.scansAfterMs }));
    result.workers = rowCount ?? 0;
  }
  result.ms = Math.round(performance.now() - started);
  return result;
}

/** The history's partitions: the next days' created, the days wholly older than doneAfterMs
 *  dropped (sql/0050 rotate_history, one statement). */
async function rotate(pool: pg.Pool, options: PurgeOptions, result: PurgeResult, hooks: PurgeHooks): Promise<void> {
  const { rows } = await pool.query<{ action: PartitionAction; partition_name: string; est_rows: number | null; detail: string | null }>(
    sql('retention/rotate_history', { ageMs: options.doneAfterMs, daysAhead: HISTORY_DAYS_AHEAD, lockTimeoutMs: HISTORY_LOCK_TIMEOUT_MS }),
  );
  for (const r of rows) {
    const n = r.est_rows ?? 0;
    if (r.action === 'dropped') {
      result.partitionsDropped += 1;
      result.droppedRows += n;
    } else if (r.action === 'created') result.partitionsCreated += 1;
    else result.partitionsSkipped += 1;
    hooks.onPartition?.(r.action, r.partition_name, n, r.detail);
  }
}

/** What purge would delete now, without deleting (`timeout-center purge --dry-run`). */
export async function countPurgeable(pool: pg.Pool, options: Pick<PurgeOptions, 'doneAfterMs' | 'scansAfterMs'>): Promise<{ timeouts: number; scans: number }> {
  const { rows } = await pool.query<{ timeouts: number; scans: number }>(
    sql((await layoutOf(pool)).name === 'citus' ? 'citus/retention/count_purgeable' : 'retention/count_purgeable', {
      timeoutsAgeMs: options.doneAfterMs,
      scansAgeMs: options.scansAfterMs,
    }),
  );
  return rows[0]!;
}

export interface RetentionDeps {
  pool: pg.Pool;
  config: RetentionConfig;
  logger: Logger;
  metrics: Metrics;
}

/** The periodic purge: one of the duties that run only while this coordinator leads (two purging
 *  at once would be safe, but wasteful), started on election and stopped on deposition. */
export class Retention extends BaseService {
  readonly name = 'retention';
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopping = false;

  constructor(private readonly deps: RetentionDeps) {
    super();
  }

  protected async onStart(): Promise<void> {
    if (!this.deps.config.enabled) return;
    this.stopping = false;
    this.schedule();
  }

  private schedule(): void {
    if (this.stopping) return;
    this.timer = setTimeout(() => {
      this.running = this.runOnce()
        .then(() => undefined)
        .finally(() => {
          this.running = undefined;
          this.schedule();
        });
    }, this.deps.config.intervalMs);
    this.timer.unref();
  }

  /** One purge. Errors are logged; the next interval tries again. */
  async runOnce(): Promise<PurgeResult | undefined> {
    const { pool, config, logger, metrics } = this.deps;
    try {
      const result = await purge(pool, config, {
        shouldStop: () => this.stopping,
        onBatch: (table, n) => metrics.purged.inc({ table }, n),
        onPartition: (action, partition, rows, detail) => {
          metrics.historyPartitions.inc({ action });
          if (action === 'skipped') logger.warn({ partition, detail }, 'retention left a history partition to the next run');
          else logger.info({ action, partition, ...(action === 'dropped' ? { rows } : {}) }, `retention ${action} a history partition`);
        },
      });
      if (result.workers > 0) metrics.purged.inc({ table: 'workers' }, result.workers);
      if (result.timeouts + result.scans + result.workers + result.partitionsDropped > 0) {
        logger.info({ ...result }, 'retention purged old rows');
      }
      return result;
    } catch (err) {
      logger.warn({ err }, 'retention purge failed; the next run retries');
      return undefined;
    }
  }

  /** Stops after the batch in progress. */
  protected async onStop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running?.catch(() => {});
  }
}
