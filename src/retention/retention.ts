// Retention: deletes done and cancelled timeouts, reduced scans (with their shards) and forgotten
// workers once they are older than the configured ages. Each batch is one short DELETE through an
// index (done_timeouts' BRIN on finished_at, sql/0010; timeouts_purgeable for cancelled ones), so a purge never holds a long lock and keeps pace with
// millions of rows a day; the space of deleted rows is reused by new rows once autovacuum has
// marked it free (see docs/operations.md). Failed timeouts are kept: operators retry them.
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
  timeouts: number;
  scans: number;
  workers: number;
  batches: number;
  ms: number;
}

export interface PurgeHooks {
  /** Checked between batches: return true to stop early (process shutting down, leadership lost). */
  shouldStop?: () => boolean;
  onBatch?: (table: 'timeouts' | 'scans', deleted: number) => void;
}

/** Deletes old rows batch by batch until none is left (or shouldStop says so). */
export async function purge(pool: pg.Pool, options: PurgeOptions, hooks: PurgeHooks = {}): Promise<PurgeResult> {
  const started = performance.now();
  const result: PurgeResult = { timeouts: 0, scans: 0, workers: 0, batches: 0, ms: 0 };
  const stop = hooks.shouldStop ?? (() => false);
  // Timeouts first (the done ones' history, then the cancelled ones): nothing references them.
  // Then scans, whose shards cascade.
  // On the Citus layout the cancelled ones go bucket by bucket (citus/retention/purge_timeouts.sql).
  const layout = await layoutOf(pool);
  const batches = [
    () => sql('retention/purge_done_timeouts', { ageMs: options.doneAfterMs, batchSize: options.batchSize }),
    ...(layout.name === 'citus'
      ? layout.buckets.map((bucket) => () => sql('citus/retention/purge_timeouts', { ageMs: options.doneAfterMs, batchSize: options.batchSize, bucket }))
      : [() => sql('retention/purge_timeouts', { ageMs: options.doneAfterMs, batchSize: options.batchSize })]),
  ];
  for (const batch of batches) {
    for (;;) {
      if (stop()) break;
      const { rowCount } = await pool.query(batch());
      const n = rowCount ?? 0;
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
      });
      if (result.workers > 0) metrics.purged.inc({ table: 'workers' }, result.workers);
      if (result.timeouts + result.scans + result.workers > 0) {
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
