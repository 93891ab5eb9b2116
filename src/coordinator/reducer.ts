// Reduce, after the map in every leader tick: scans whose shards are all final get their totals
// (reduce.ts, a fenced transaction), and failures raise alerts: a scan with failed timeouts, and
// consecutiveFailedScans of them in a row.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Alerter } from '../alerts/alerter.js';
import type { Metrics } from '../observability/metrics.js';
import type { ClaimFloors } from './claim-floors.js';
import { consecutiveFailedScans, reduceScans, type ReducedScan } from './reduce.js';

export interface ReducerDeps {
  pool: pg.Pool;
  alerter: Alerter;
  metrics: Metrics;
  logger: Logger;
  /** alerts.consecutiveFailedScans */
  consecutiveFailed: number;
  /** The map's floors: the oldest scan not reduced and shard in flight, which the reduce reads from. */
  floors?: ClaimFloors;
}

export class Reducer {
  constructor(private readonly deps: ReducerDeps) {}

  async reduce(epoch: number): Promise<ReducedScan[]> {
    const reduced = await reduceScans(this.deps.pool, epoch, this.deps.floors?.reduceBounds());
    await this.report(reduced);
    return reduced;
  }

  private async report(reduced: ReducedScan[]): Promise<void> {
    const { metrics, logger, alerter } = this.deps;
    let anyFailed = false;
    for (const scan of reduced) {
      metrics.scanDuration.observe(scan.duration_s);
      metrics.scans.inc({ result: scan.failed > 0 ? 'failed' : 'ok' });
      logger.info(
        {
          scanId: scan.id,
          claimed: scan.claimed,
          done: scan.done,
          skipped: scan.skipped,
          failed: scan.failed,
          retried: scan.retried,
          shards: scan.shard_count,
        },
        'scan reduced',
      );
      if (scan.failed > 0) {
        anyFailed = true;
        void alerter.raise({
          type: 'scan_failures',
          message: `scan ${scan.id}: ${scan.failed} of ${scan.claimed} timeouts failed for good (see timeout_center.failed_timeouts)`,
          details: { scanId: scan.id, failed: scan.failed, claimed: scan.claimed, failures: scan.failures },
        });
      }
    }
    if (!anyFailed) return;
    const n = this.deps.consecutiveFailed;
    const streak = await consecutiveFailedScans(this.deps.pool, n + 1);
    if (streak === n) {
      void alerter.raise({
        type: 'consecutive_failed_scans',
        message: `${n} scans in a row ended with failed timeouts: a handler or the orders' database may be broken`,
        details: { consecutive: n },
      });
    }
  }
}
