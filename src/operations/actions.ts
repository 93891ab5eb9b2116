// Every operator action, audited, whatever the entry point (the CLI, the console): one function
// each, here. Retry, cancel and reschedule live in timeouts.ts, rerun in scans.ts; the flow
// controls (pause, resume, limit, reset; a business database's rate) are the audited functions of
// src/flow/, whose trigger on timeout_center.kinds records every change; purge is below.
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Database } from '../db/schema.js';
import { recordAudit } from '../flow/kind-controls.js';
import { purge, type PurgeHooks, type PurgeOptions, type PurgeResult } from '../retention/retention.js';
import { OperationInputError, retryAudited } from './timeouts.js';
import type { RetryResult } from './retry.js';

export { pauseKind, resumeKind, setKindLimits, resetKindControls, listKindControls, ControlInputError } from '../flow/kind-controls.js';
export { setTargetRateLimit, resetTargetControls, listTargetControls } from '../flow/target-controls.js';
export { cancelAudited, cancelManyAudited, rescheduleAudited, retryAudited, OperationInputError } from './timeouts.js';
export { rerunShard, RerunRefused } from './scans.js';

/** Retries every failed timeout of every kind ("retry all matching" with no filter: asked for
 *  explicitly), one audited retry per kind. */
export async function retryEveryFailed(db: Kysely<Database>, actor: string): Promise<Pick<RetryResult, 'retried' | 'left'>> {
  const kinds = await db.selectFrom('timeout_center.kinds').select('kind').orderBy('kind').execute();
  let retried = 0;
  let left = 0;
  for (const { kind } of kinds) {
    const r = await retryAudited(db, { kind }, actor);
    retried += r.retried;
    left += r.left;
  }
  return { retried, left };
}

/** `timeout-center purge`: the retention purge run by an operator, audited with what it deleted. */
export async function purgeAudited(pool: pg.Pool, options: PurgeOptions, actor: string, hooks: PurgeHooks = {}): Promise<PurgeResult> {
  if (options.doneAfterMs < 0 || options.scansAfterMs < 0) throw new OperationInputError('purge ages must not be negative');
  const result = await purge(pool, options, hooks);
  await recordAudit(pool, {
    actor,
    action: 'purge',
    details: {
      doneAfterMs: options.doneAfterMs,
      scansAfterMs: options.scansAfterMs,
      deleted: { timeouts: result.timeouts, scans: result.scans, workers: result.workers },
      ...(result.partitionsDropped > 0 ? { droppedPartitions: result.partitionsDropped, droppedRows: result.droppedRows } : {}),
    },
  });
  return result;
}

/** The declared kinds, for pickers and checks. */
export async function kindNames(pool: pg.Pool): Promise<string[]> {
  return (await pool.query<{ kind: string }>('SELECT kind FROM timeout_center.kinds ORDER BY kind')).rows.map((r) => r.kind);
}

export interface KindSettings {
  kind: string;
  shardSize: number;
  maxAttempts: number;
  backoffMs: number;
  handlerType: string;
  description: string | null;
}

/** Each kind's settings from the config (as `migrate` and process starts wrote them). */
export async function kindSettings(pool: pg.Pool): Promise<KindSettings[]> {
  const { rows } = await pool.query<KindSettings>(
    `SELECT kind, shard_size AS "shardSize", max_attempts AS "maxAttempts", backoff_ms AS "backoffMs", handler_type AS "handlerType", description
       FROM timeout_center.kinds`,
  );
  return rows;
}
