// Recovery from PostgreSQL, the source of truth: shards whose worker died are requeued (or fail
// once they used up their attempts): at once when the worker is gone (no heartbeat within
// worker.goneAfterMs), else when its lease runs out; queued shards whose message went missing are published
// again, and everything queued is republished when the channel lost its data.
import type pg from 'pg';
import { sql } from '../db/queries.js';
import { layoutOf } from '../db/citus-layout.js';
import type { ShardMessage } from '../transport/channel.js';
import { fencedTransaction } from './fence.js';

const BATCH = 1000;

export interface ReapOptions {
  republishAfterMs: number;
  channelLost: boolean;
  /** worker.goneAfterMs: the leases of a worker gone this long end now (expire_gone.sql). */
  goneAfterMs: number;
  /** Shards whose deliveries sat with a gone worker (recovery.ts released them in Redis): those
   *  still queued are published again now. */
  unpublish: number[];
  /** The oldest shard in flight and scan not reduced at the last tick (claim-floors.ts): the
   *  statements read from them, not from every version an old snapshot keeps. */
  shardsFrom: number;
  scansFrom: number;
}

export interface ReapResult {
  /** Shards to publish again. */
  republish: ShardMessage[];
  abandoned: { shardId: number; kind: string; scanId: number; failed: number }[];
  requeued: number;
  stale: number;
  /** Leases of gone workers ended now (their shards are in `requeued` or `abandoned`). */
  takenOver: number;
  orphanScans: number;
}

type ShardRow = { id: number; scan_id: number; kind: string };
const toMessage = (r: ShardRow): ShardMessage => ({ shardId: r.id, scanId: r.scan_id, kind: r.kind });

export async function reap(pool: pg.Pool, epoch: number, options: ReapOptions): Promise<ReapResult> {
  const citus = (await layoutOf(pool)).name === 'citus';
  return fencedTransaction(pool, epoch, async (client) => {
    // A gone worker's read-ahead deliveries and leases first, so that the steps below hand its
    // shards on in this same reap.
    if (options.unpublish.length > 0) await client.query(sql('coordinator/unpublish_shards', { shardIds: options.unpublish }));
    const expired = await client.query(sql('coordinator/expire_gone', { goneAfterMs: options.goneAfterMs, maxShards: BATCH, shardsFrom: options.shardsFrom }));
    type Abandoned = { id: number; kind: string; scan_id: number; failed_count: number };
    // On Citus only when a shard is doomed (any_doomed.sql: its UPDATE of the pinned rows would go
    // to every shard, with two-phase commit on every worker node, at every reap).
    const doomed = !citus || (await client.query<{ doomed: boolean }>(sql('citus/coordinator/any_doomed'))).rows[0]!.doomed;
    const abandoned = doomed
      ? await client.query<Abandoned>(
          citus
            ? sql('citus/coordinator/abandon_shards', { maxShards: BATCH })
            : sql('coordinator/abandon_shards', { maxShards: BATCH, shardsFrom: options.shardsFrom }),
        )
      : { rows: [] as Abandoned[] };
    const requeued = await client.query<ShardRow>(sql('coordinator/requeue_expired', { maxShards: BATCH, shardsFrom: options.shardsFrom }));
    const stale = await client.query<ShardRow>(
      sql('coordinator/republish_queued', {
        republishAfterMs: options.republishAfterMs,
        all: options.channelLost,
        maxShards: options.channelLost ? 100_000 : BATCH,
        shardsFrom: options.shardsFrom,
      }),
    );
    const orphans = await client.query(sql('coordinator/close_orphan_scans', { epoch, scansFrom: options.scansFrom }));
    return {
      republish: [...requeued.rows.map(toMessage), ...stale.rows.map(toMessage)],
      abandoned: abandoned.rows.map((r) => ({ shardId: r.id, kind: r.kind, scanId: r.scan_id, failed: r.failed_count })),
      requeued: requeued.rows.length,
      stale: stale.rows.length,
      takenOver: expired.rowCount ?? 0,
      orphanScans: orphans.rowCount ?? 0,
    };
  });
}
