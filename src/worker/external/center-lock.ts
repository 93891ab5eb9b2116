// Step 3's fence on the commit-first path: before the business COMMIT, a transaction on the
// center's database takes the shard's row under this run's lease (lock_shard.sql, FOR KEY SHARE)
// and keeps it until the record. The reaper, a drain's release and another worker's take_lease all
// skip or wait for it, while the lease keeper can still renew: a run whose lease was lost rolls
// back instead of committing, and no later run can start between the two commits.
import type pg from 'pg';
import { sql } from '../../db/queries.js';
import type { Lease } from '../lease.js';

/** A transaction on the center's database that holds the shard's row (lock_shard.sql). */
export class CenterLock {
  private done = false;
  constructor(readonly client: pg.PoolClient) {}

  async commit(): Promise<void> {
    if (this.done) return;
    this.done = true;
    try {
      await this.client.query('COMMIT');
      this.client.release();
    } catch (err) {
      this.client.release(true);
      throw err;
    }
  }

  async rollback(): Promise<void> {
    if (this.done) return;
    this.done = true;
    let broken = false;
    await this.client.query('ROLLBACK').catch(() => (broken = true));
    this.client.release(broken);
  }
}

/** The shard's row, under this run's lease, in an open center transaction. Undefined when the
 *  lease is no longer ours. */
export async function lockLease(pool: pg.Pool, lease: Lease): Promise<CenterLock | undefined> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rowCount } = await client.query(sql('worker/lock_shard', { shardId: lease.id, leaseToken: lease.lease_token }));
    const lock = new CenterLock(client);
    if (rowCount === 0) {
      await lock.rollback();
      return undefined;
    }
    return lock;
  } catch (err) {
    client.release(true);
    throw err;
  }
}
