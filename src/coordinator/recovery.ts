// Recovery, the first step of every leader tick: republish what Redis lost (the channel's marker
// key is gone) and what dead workers left behind (the reaper: leases of gone workers and expired
// leases requeued, shards queued too long republished, shards out of attempts abandoned with an
// alert). A worker is gone when it wrote no heartbeat for worker.goneAfterMs: the deliveries it
// read ahead (pending under its consumer in Redis) are acknowledged and their shards published
// again, and its leases end, in the same reap. At most once a second, and at once after an
// election or a Redis loss.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Alerter } from '../alerts/alerter.js';
import type { Metrics } from '../observability/metrics.js';
import type { ShardChannel } from '../transport/channel.js';
import type { Dispatcher } from './dispatch.js';
import { sql } from '../db/queries.js';
import type { ClaimFloors } from './claim-floors.js';
import { reap } from './reaper.js';

const REAP_EVERY_MS = 1000;

export interface RecoveryDeps {
  pool: pg.Pool;
  channel: ShardChannel;
  dispatcher: Dispatcher;
  alerter: Alerter;
  metrics: Metrics;
  logger: Logger;
  republishAfterMs: number;
  /** worker.goneAfterMs. */
  goneAfterMs: number;
  /** The kinds whose streams this leader recovers. */
  kinds: string[];
  /** The map's floors: the oldest shard in flight and scan not reduced, which the reap reads from. */
  floors?: ClaimFloors;
}

export class Recovery {
  private lastReapAt = 0;

  constructor(private readonly deps: RecoveryDeps) {}

  /** A new leader recovers at once. */
  reset(): void {
    this.lastReapAt = 0;
  }

  /** Reaps when due (or Redis lost its data), then publishes what waits. */
  async recover(epoch: number): Promise<void> {
    const { pool, channel, dispatcher, metrics, logger } = this.deps;
    const channelLost = await channel.checkLostAndMark();
    // Said whether or not anything was queued, so an operator sees when the channel was rebuilt.
    if (channelLost) logger.info('shard channel marker missing (first start, or Redis lost its data): the queued shards are republished from PostgreSQL');
    if (channelLost || Date.now() - this.lastReapAt >= REAP_EVERY_MS) {
      this.lastReapAt = Date.now();
      const released = await this.releaseGone();
      const reaped = await reap(pool, epoch, {
        republishAfterMs: this.deps.republishAfterMs,
        channelLost,
        goneAfterMs: this.deps.goneAfterMs,
        unpublish: released.shardIds,
        shardsFrom: this.deps.floors?.shardsFrom() ?? 0,
        scansFrom: this.deps.floors?.scansFrom() ?? 0,
      });
      if (released.workers.length > 0 || reaped.takenOver > 0) {
        logger.warn(
          { workers: released.workers, deliveries: released.shardIds.length, leases: reaped.takenOver, goneAfterMs: this.deps.goneAfterMs },
          'took over the shards of gone workers (no heartbeat within worker.goneAfterMs)',
        );
        metrics.reclaims.inc({ source: 'worker_gone' }, released.shardIds.length + reaped.takenOver);
      }
      if (reaped.republish.length > 0 || reaped.abandoned.length > 0 || reaped.orphanScans > 0) {
        logger.warn(
          { requeued: reaped.requeued, stale: reaped.stale, abandoned: reaped.abandoned.length, orphanScans: reaped.orphanScans, channelLost },
          'reaper recovered shards',
        );
        metrics.reclaims.inc({ source: channelLost ? 'channel_lost' : 'stale_queue' }, reaped.stale);
        metrics.reclaims.inc({ source: 'lease_expired' }, reaped.requeued);
        metrics.reclaims.inc({ source: 'abandoned' }, reaped.abandoned.length);
      }
      for (const a of reaped.abandoned) {
        // Failed shards and their timeouts show per kind beside the workers' outcomes.
        metrics.shards.inc({ kind: a.kind, outcome: 'failed' });
        metrics.timeouts.inc({ kind: a.kind, outcome: 'failed' }, a.failed);
        void this.deps.alerter.raise({
          type: 'shard_abandoned',
          message: `shard ${a.shardId} (${a.kind}, scan ${a.scanId}) was abandoned by its workers too many times; ${a.failed} timeouts marked failed`,
          details: { ...a },
        });
      }
      dispatcher.add(reaped.republish);
    }
    await dispatcher.flush();
  }

  /** Acknowledges the deliveries pending in Redis under gone workers' consumers; returns their
   *  shard ids (the reap publishes those still queued again) and the workers. */
  private async releaseGone(): Promise<{ workers: string[]; shardIds: number[] }> {
    const { pool, channel, kinds, goneAfterMs } = this.deps;
    const holders = await channel.holders(kinds);
    if (holders.length === 0) return { workers: [], shardIds: [] };
    const { rows } = await pool.query<{ worker_id: string }>(sql('coordinator/gone_consumers', { consumers: holders, goneAfterMs }));
    const shardIds: number[] = [];
    for (const { worker_id } of rows) for (const m of await channel.releaseConsumer(worker_id, kinds)) shardIds.push(m.shardId);
    return { workers: rows.map((r) => r.worker_id), shardIds };
  }
}
