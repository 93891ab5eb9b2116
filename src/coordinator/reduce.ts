// Reduce: close every scan whose shards are all final with its totals, exactly once.
import type pg from 'pg';
import { sql } from '../db/queries.js';
import { fencedTransaction } from './fence.js';

export interface ReducedScan {
  id: number;
  claimed: number;
  shard_count: number;
  done: number;
  skipped: number;
  failed: number;
  retried: number;
  failures: { shard: number; kind: string; failed: number; error: string | null }[] | null;
  duration_s: number;
}

export interface ReduceBounds {
  scansFrom: number;
  shardsFrom: number;
  server: string;
}
const NO_BOUNDS: ReduceBounds = { scansFrom: 0, shardsFrom: 0, server: '' };

/** bounds: the oldest scan not reduced and shard in flight at the last tick, and the server they
 *  were computed on (claim-floors.ts; none: from the first). */
export async function reduceScans(pool: pg.Pool, epoch: number, bounds: ReduceBounds = NO_BOUNDS): Promise<ReducedScan[]> {
  return fencedTransaction(pool, epoch, async (client) => {
    const { rows } = await client.query<ReducedScan>(sql('coordinator/reduce', { maxScans: 500, ...bounds }));
    return rows;
  });
}

/** How many of the latest reduced scans, newest first, had failures without a clean one between. */
export async function consecutiveFailedScans(pool: pg.Pool, limit: number): Promise<number> {
  const { rows } = await pool.query<{ failed: number }>(sql('coordinator/recent_failures', { limit }));
  let n = 0;
  for (const r of rows) {
    if (r.failed > 0) n += 1;
    else break;
  }
  return n;
}
