// Every coordinator write runs through fencedTransaction: it locks the lease row FOR SHARE and
// checks the epoch first. A takeover (bump_epoch.sql: a greater epoch) waits for running fenced transactions
// and every later one sees the new epoch, so a stale coordinator's write is refused, never applied.
import type pg from 'pg';
import { withTransaction } from '../db/pool.js';
import { sql } from '../db/queries.js';

export class FencedError extends Error {
  override name = 'FencedError';
  constructor(
    readonly epoch: number,
    readonly currentEpoch: number,
    readonly holder: string | null,
  ) {
    super(`write refused: this coordinator holds epoch ${epoch} but ${holder ?? 'another coordinator'} holds epoch ${currentEpoch}`);
  }
}

export async function fencedTransaction<T>(pool: pg.Pool, epoch: number, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  if (epoch <= 0) throw new FencedError(epoch, -1, null);
  return withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ epoch: number; holder: string | null }>(sql('coordinator/fence_check'));
    const current = rows[0];
    if (!current || current.epoch !== epoch) throw new FencedError(epoch, current?.epoch ?? -1, current?.holder ?? null);
    return fn(client);
  });
}
