// Isolating a row that kills workers (a code handler that crashes the process, a native crash):
// a shard re-run after its worker died splits its pinned rows into two new shards instead of
// applying them all again (split_pinned.sql). The half without the killer commits; the other
// half dies, is re-run, and splits again, until the killer is alone in a one-row shard that the
// reaper abandons after the kind's max attempts. Its shard mates are never failed with it.
// The new shards are left queued and unpublished: the coordinator publishes them within a tick
// (republish_queued.sql takes queued shards with no published_at).
import type pg from 'pg';
import { withTransaction } from '../db/pool.js';
import { sql } from '../db/queries.js';

export interface PinInputs {
  shardId: number;
  kind: string;
  claimLimit: number;
  leaseToken: string;
  /** The shard's bucket on the Citus layout; null otherwise. */
  bucket: number | null;
}

/**
 * Pins the rows a re-run will hold (pin.sql), in the caller's transaction, under the shard's row
 * lock (lock_shard.sql): while it holds, no other run can lease the shard (take_lease.sql skips a
 * locked row) nor the reaper requeue it, so the pin commits under the lease it checked. pin.sql
 * alone checked the lease when it began: one that finished past the lease (seconds, while a
 * failover promoted the standby) left its rows dispatched to a shard the next run had finished
 * meanwhile, never applied. Returns how many rows it pinned; 0 when the lease is no longer ours.
 */
export async function pinRows(client: pg.ClientBase, pin: PinInputs): Promise<number> {
  const { rowCount } = await client.query(sql('worker/lock_shard', { shardId: pin.shardId, leaseToken: pin.leaseToken }));
  if (rowCount === 0) return 0;
  const { bucket, ...inputs } = pin;
  const { rows } = await client.query<{ pinned: number }>(bucket === null ? sql('worker/pin', inputs) : sql('citus/worker/pin', { ...inputs, bucket }));
  return rows[0]?.pinned ?? 0;
}

export interface SplitShard {
  id: number;
  claimLimit: number;
}

/** Splits the shard's pinned rows into two new shards; returns them, or [] when the shard holds
 *  fewer than two pinned rows (apply it as is) or the lease is no longer ours. */
export async function splitPinned(pool: pg.Pool, shardId: number, scanId: number, leaseToken: string, bucket: number | null = null): Promise<SplitShard[]> {
  return withTransaction(pool, async (client) => {
    // The scan row lock serialises splits of one scan, so each sees the others' seq numbers.
    await client.query(sql('worker/lock_scan', { scanId }));
    const { rows } = await client.query<{ id: string; claim_limit: number }>(
      bucket === null ? sql('worker/split_pinned', { shardId, leaseToken }) : sql('citus/worker/split_pinned', { shardId, leaseToken, bucket }),
    );
    return rows.map((r) => ({ id: Number(r.id), claimLimit: Number(r.claim_limit) }));
  });
}
