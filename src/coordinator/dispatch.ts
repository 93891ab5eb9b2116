// Dispatch: the leader's shards on their way to Redis. Shards written (or recovered) but not yet
// published, because Redis refused them, wait here and go first on the next tick; PostgreSQL keeps
// them queued meanwhile, and the reaper republishes them anyway after republishAfterMs.
import type { Logger } from 'pino';
import { failpoint } from '../failpoints.js';
import type { LeaderFlow } from '../flow/leader-flow.js';
import type { Metrics } from '../observability/metrics.js';
import type { ShardChannel, ShardMessage } from '../transport/channel.js';
import type { PlannedScan } from './map.js';

/** Past this many unpublished shards the oldest are dropped from memory (the reaper has them). */
const MAX_UNPUBLISHED = 100_000;

export class Dispatcher {
  private unpublished: ShardMessage[] = [];
  /** Publishes refused since the last one Redis took: an outage warns once, not at every tick. */
  private refused = 0;

  constructor(
    private readonly channel: ShardChannel,
    private readonly flow: LeaderFlow,
    private readonly metrics: Metrics,
    private readonly logger: Logger,
  ) {}

  /** Shards waiting for a publish that Redis refused. */
  get waiting(): number {
    return this.unpublished.length;
  }

  /** Shards recovered by the reaper: published with the next flush. */
  add(shards: ShardMessage[]): void {
    this.unpublished.push(...shards);
  }

  /** A plan's shards go to flow control's books and the metrics, then to Redis. */
  async publishPlanned(planned: PlannedScan): Promise<void> {
    this.flow.planned(planned.byKind, planned.byTarget);
    this.metrics.planned.inc(planned.capacity);
    this.metrics.plannedDeprecated.inc(planned.capacity);
    await failpoint('coordinator.before-publish');
    this.unpublished.push(...planned.shards);
    await this.flush();
  }

  async flush(): Promise<void> {
    if (this.unpublished.length === 0) return;
    const batch = this.unpublished;
    this.unpublished = [];
    try {
      await this.channel.publish(batch);
      this.refused = 0;
    } catch (err) {
      this.unpublished = batch.concat(this.unpublished).slice(0, MAX_UNPUBLISHED);
      this.refused += 1;
      const log = { err, shards: this.unpublished.length, attempts: this.refused };
      if (this.refused === 1) this.logger.warn(log, 'could not publish shards to Redis; will retry');
      else this.logger.debug(log, 'could not publish shards to Redis again');
    }
  }
}
