// Map: claim due timeouts in bounded chunks and write them as shards of one scan. The scan row
// is written in the same fenced transaction as its first chunk, so a tick that finds nothing
// leaves no trace.
import type pg from 'pg';
import { query } from '../db/queries.js';
import type { ShardMessage } from '../transport/channel.js';
import { fencedTransaction } from './fence.js';

export interface ChunkResult {
  scanId: number;
  shards: ShardMessage[];
  claimed: number;
}

/** Claims up to maxRows into a scan (a new one when scanId is undefined). Returns undefined when
 *  nothing was due; a new scan row is then not kept. */
export async function claimChunk(
  pool: pg.Pool,
  epoch: number,
  args: { scanId: number | undefined; coordinatorId: string; cutoff: Date; kinds: string[]; maxRows: number },
): Promise<ChunkResult | undefined> {
  return fencedTransaction(pool, epoch, async (client) => {
    let scanId = args.scanId;
    if (scanId === undefined) {
      const { rows } = await client.query<{ id: number }>(
        'INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES ($1, $2, $3) RETURNING id',
        [epoch, args.coordinatorId, args.cutoff],
      );
      scanId = rows[0]!.id;
    }
    const { rows } = await client.query<{ id: number; kind: string; size: number }>(query(new URL('.', import.meta.url), 'claim'), [
      scanId,
      args.cutoff,
      args.kinds,
      args.maxRows,
    ]);
    if (rows.length === 0) {
      // Nothing was due after all (another claim won the rows): drop the scan row we just wrote.
      if (args.scanId === undefined) await client.query('DELETE FROM timeout_center.scans WHERE id = $1', [scanId]);
      return undefined;
    }
    return {
      scanId,
      shards: rows.map((r) => ({ shardId: r.id, scanId: scanId!, kind: r.kind })),
      claimed: rows.reduce((n, r) => n + r.size, 0),
    };
  });
}

/** Marks a scan fully mapped: from now on reduce may close it. */
export async function finishMap(pool: pg.Pool, epoch: number, scanId: number): Promise<void> {
  await fencedTransaction(pool, epoch, (client) =>
    client.query("UPDATE timeout_center.scans SET state = 'mapped', mapped_at = now() WHERE id = $1 AND state = 'mapping'", [scanId]),
  );
}
