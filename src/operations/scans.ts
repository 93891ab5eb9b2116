// Scans and their shards as the console shows them (views scan_report, shard_report, the same the
// `scans` and `shards` verbs read), and "rerun this shard".
//
// Rerun, defined: in the one-write design a shard is a claim on its kind's due rows, not a list
// of ids, so re-publishing a finished shard would claim whatever is due now, not its own rows.
// What an operator means by rerunning a shard is "apply again what this shard failed": its failed
// timeouts go back to pending (attempts 0, due now) through the same retry as `retry --shard`,
// and the next scan claims them into a new shard. A shard still queued or running is refused
// (it is being worked on), and so is one with no failed timeouts (nothing to rerun).
import { layoutOf } from '../db/citus-layout.js';
import { InputError } from '../input-error.js';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import { recordAudit, type Queryable } from '../flow/kind-controls.js';
import { retryFailed, type RetryResult } from './retry.js';
import { queryable } from './queryable.js';

export interface ScanSummary {
  scanId: number;
  state: string;
  cutoff: Date;
  claimed: number;
  shards: number;
  done: number | null;
  skipped: number | null;
  failed: number | null;
  retried: number | null;
  startedAt: Date;
  reducedAt: Date | null;
  durationSeconds: number | null;
  epoch: number;
  coordinator: string;
}

export interface ShardSummary {
  shardId: number;
  scanId: number;
  kind: string;
  size: number;
  state: string;
  attempts: number;
  owner: string | null;
  done: number | null;
  skipped: number | null;
  failed: number | null;
  retried: number | null;
  errorSample: string | null;
  startedAt: Date | null;
  finishedAt: Date | null;
  durationSeconds: number | null;
  /** Failed timeouts this shard holds now (what "rerun" would retry). */
  failedNow: number;
}

const SCAN_COLUMNS = `scan_id AS "scanId", state, cutoff, claimed, shard_count AS shards, done, skipped, failed, retried,
  started_at AS "startedAt", reduced_at AS "reducedAt", extract(epoch FROM duration)::float8 AS "durationSeconds", epoch, coordinator`;

export async function listScans(db: Queryable, opts: { limit: number; kind?: string | undefined }): Promise<ScanSummary[]> {
  const { rows } = await db.query<ScanSummary>(
    `SELECT ${SCAN_COLUMNS} FROM timeout_center.scan_report r
      WHERE $2::text IS NULL OR EXISTS (SELECT 1 FROM timeout_center.shards sh WHERE sh.scan_id = r.scan_id AND sh.kind = $2)
      ORDER BY scan_id DESC LIMIT $1`,
    [opts.limit, opts.kind ?? null],
  );
  return rows;
}

export async function getScan(db: Queryable, scanId: number): Promise<{ scan: ScanSummary; shards: ShardSummary[] } | null> {
  const { rows } = await db.query<ScanSummary>(`SELECT ${SCAN_COLUMNS} FROM timeout_center.scan_report WHERE scan_id = $1`, [scanId]);
  if (!rows[0]) return null;
  if ((await layoutOf(db)).name === 'citus') {
    // On Citus (docs/scale.md "Citus: what runs") a subquery on timeouts correlated on a shard of
    // the coordinator's shards table is refused: the scan's failed counts come from one grouped read.
    const shards = await db.query<ShardSummary>(
      `SELECT r.shard_id AS "shardId", r.scan_id AS "scanId", r.kind, r.size, r.state, r.attempts, r.owner, r.done, r.skipped, r.failed,
              r.retried, r.error_sample AS "errorSample", r.started_at AS "startedAt", r.finished_at AS "finishedAt",
              extract(epoch FROM r.duration)::float8 AS "durationSeconds", coalesce(f.n, 0)::int AS "failedNow"
         FROM timeout_center.shard_report r
         LEFT JOIN (SELECT t.shard_id, count(*) AS n FROM timeout_center.timeouts t
                     WHERE t.state = 'failed' AND t.shard_id IN (SELECT id FROM timeout_center.shards WHERE scan_id = $1)
                     GROUP BY t.shard_id) f ON f.shard_id = r.shard_id
        WHERE r.scan_id = $1 ORDER BY r.shard_id`,
      [scanId],
    );
    return { scan: rows[0], shards: shards.rows };
  }
  const shards = await db.query<ShardSummary>(
    `SELECT r.shard_id AS "shardId", r.scan_id AS "scanId", r.kind, r.size, r.state, r.attempts, r.owner, r.done, r.skipped, r.failed,
            r.retried, r.error_sample AS "errorSample", r.started_at AS "startedAt", r.finished_at AS "finishedAt",
            extract(epoch FROM r.duration)::float8 AS "durationSeconds",
            (SELECT count(*) FROM timeout_center.timeouts t WHERE t.shard_id = r.shard_id AND t.state = 'failed')::int AS "failedNow"
       FROM timeout_center.shard_report r WHERE r.scan_id = $1 ORDER BY r.shard_id`,
    [scanId],
  );
  return { scan: rows[0], shards: shards.rows };
}

/** Refused rerun: the reason is written for the operator; nothing was changed. */
export class RerunRefused extends InputError {
  override name = 'RerunRefused';
}

/** Reruns a finished shard (see the header): retries its failed timeouts, audited as rerun_shard. */
export async function rerunShard(db: Kysely<Database>, shardId: number, actor: string): Promise<RetryResult & { kind: string }> {
  return db.transaction().execute(async (trx) => {
    const shard = await trx
      .selectFrom('timeout_center.shards')
      .select(['id', 'kind', 'state', 'scan_id'])
      .where('id', '=', shardId)
      .forUpdate()
      .executeTakeFirst();
    if (!shard) throw new RerunRefused(`shard ${shardId} does not exist (never created, or purged by retention with its scan)`);
    if (shard.state === 'queued' || shard.state === 'running') {
      throw new RerunRefused(`shard ${shardId} is ${shard.state}: it is being worked on; rerun it once it is done or failed`);
    }
    const result = await retryFailed(trx, { shard: [shardId] });
    if (result.matched === 0)
      throw new RerunRefused(`shard ${shardId} has no failed timeouts: nothing to rerun (its timeouts are done, skipped or already retried)`);
    await recordAudit(queryable(trx), {
      actor,
      action: 'rerun_shard',
      kind: shard.kind,
      target: `shard ${shardId}`,
      details: { scanId: Number(shard.scan_id), retried: result.retried, left: result.left, ids: result.ids.slice(0, 100) },
    });
    return { ...result, kind: shard.kind };
  });
}
