// A worker's lease on a shard: taken in a transaction of its own before any claim, renewed while
// the shard runs (lease-keeper.ts), given back when this worker does not serve the shard's kind,
// and, for a shard planned ahead of its rows' due instant, the wait until it may claim.
import type pg from 'pg';
import { layoutOf } from '../db/citus-layout.js';
import { sql } from '../db/queries.js';
import { bindLiterals } from './bind-literals.js';

/** The lease a worker took on a shard (take_lease.sql); both execution paths run under it. */
export interface Lease {
  id: number;
  scan_id: number;
  kind: string;
  lease_token: string;
  attempts: number;
  claim_limit: number;
  /** The bucket the shard claims from on the Citus layout (shards.bucket); null on plain PostgreSQL. */
  bucket: number | null;
  /** Every other shard of a flood mapped ahead claims the flood's newest rows first
   *  (take_lease.sql; BatchSqlHandler.newest). */
  from_newest: boolean;
  /** An earlier run began its claim and did not finish (take_lease.sql; sql/0018): a re-run pins
   *  and splits its rows only then. */
  suspect: boolean;
  /** When (performance.now()) the claim may start: for a shard planned ahead of its rows' due
   *  instant (shards.not_before, sql/0011), the lease's time plus take_lease.sql's wait_ms,
   *  measured on the database clock; for any other, the lease's time. */
  claimAt: number;
}

/**
 * take_lease.sql in a transaction of its own that does not wait for the WAL flush
 * (synchronous_commit off): one round trip, no fsync per shard. A lease lost in a PostgreSQL crash
 * only means the shard is taken again; the shard's own transaction, which applies the timeouts,
 * commits durably. The parameters are numbers and one escaped literal (a multi-statement string
 * cannot carry bind parameters). lock_kind.sql goes first in the same transaction: it locks
 * only for a kind with a cap on running shards (flow control), so the cap check is atomic.
 */
export async function takeLease(pool: pg.Pool, shardId: number, workerId: string, leaseMs: number): Promise<Lease | undefined> {
  if (!Number.isSafeInteger(shardId) || shardId <= 0) throw new Error(`invalid shard id in a delivery: ${String(shardId)}`);
  const lockKind = bindLiterals(sql('worker/lock_kind', { shardId }));
  const citus = (await layoutOf(pool)).name === 'citus';
  const take = bindLiterals(sql(citus ? 'citus/worker/take_lease' : 'worker/take_lease', { shardId, workerId, leaseMs: Math.floor(leaseMs) }));
  type Taken = Omit<Lease, 'claimAt' | 'bucket'> & { wait_ms: number; bucket?: number | null };
  const results = (await pool.query(`BEGIN; SET LOCAL synchronous_commit = off; ${lockKind}; ${take}; COMMIT`)) as unknown as pg.QueryResult<Taken>[];
  const row = results[3]?.rows[0];
  if (!row) return undefined;
  const { wait_ms, ...lease } = row;
  return {
    ...lease,
    id: Number(row.id),
    scan_id: Number(row.scan_id),
    attempts: Number(row.attempts),
    claim_limit: Number(row.claim_limit),
    bucket: row.bucket === undefined || row.bucket === null ? null : Number(row.bucket),
    claimAt: performance.now() + Number(wait_ms),
  };
}

/** Why takeLease found nothing, for a shard still queued (hold_shard.sql): held, its kind paused
 *  or at its cap (it stays queued, unpublished, until the coordinator publishes it again), or not
 *  held, its row locked for a moment by another statement (lease it again). Undefined: the shard is
 *  final or another worker's. */
export async function holdShard(pool: pg.Pool, shardId: number): Promise<{ kind: string; held: boolean } | undefined> {
  const { rows } = await pool.query<{ kind: string; held: boolean }>(sql('worker/hold_shard', { shardId }));
  return rows[0];
}

/** Marks queued shards unpublished (hand_back.sql): the coordinator publishes them again at its
 *  next reap, within a second. */
export async function handBack(pool: pg.Pool, shardIds: number[]): Promise<void> {
  await pool.query(sql('worker/hand_back', { shardIds }));
}

/** Gives a lease back so another worker can take the shard at once (the attempt not counted). */
export async function releaseLease(pool: pg.Pool, lease: Lease): Promise<void> {
  await pool.query(sql('worker/release_lease', { shardId: lease.id, leaseToken: lease.lease_token }));
}

/** Waits until a lease's claim may start (a shard planned ahead of its rows' due instant). One
 *  millisecond more: a timer may fire up to a millisecond before its delay by performance.now(). */
export async function untilClaimAt(lease: Lease): Promise<void> {
  const ms = lease.claimAt - performance.now();
  if (ms > 0) await new Promise((r) => setTimeout(r, Math.ceil(ms) + 1));
}
