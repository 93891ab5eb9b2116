// The resolver of two-phase external runs left prepared (two-phase.ts): a worker that died, froze
// or lost a database between its PREPARE TRANSACTION and its COMMIT PREPARED leaves its shard's
// row and timeouts locked in the center, so neither the reaper nor a payer's cancel gets past
// them. Every worker with business databases looks for such transactions every few seconds and
// finishes each by its marker in the business database it names (resolvePrepared): committed if
// the run's marker committed there, rolled back if not. A prepared transaction is only looked at
// once it is older than AGE_MS (a live run finishes its own within milliseconds); resolving a live
// one is still exact (the fence waits for its business transaction), only wasted work.
import type pg from 'pg';
import type { Logger } from 'pino';
import { sql } from '../db/queries.js';
import { periodic, type Service } from '../service.js';
import type { BusinessDatabases } from './business-db.js';
import { describeError } from './failures.js';
import { parseTwoPhaseId, resolvePrepared } from './two-phase.js';

/** How often a worker looks, and how old a prepared run must be to be resolved. */
export const RESOLVE_EVERY_MS = 2000;
export const AGE_MS = 3000;

/** Resolves what it finds now, each resolution and failure logged. */
export async function resolveLeftPrepared(pool: pg.Pool, databases: BusinessDatabases, known: ReadonlySet<string>, logger: Logger): Promise<void> {
  const { rows } = await pool.query<{ gid: string }>(sql('worker/prepared_left', { olderThanMs: AGE_MS }));
  for (const { gid } of rows) {
    const run = parseTwoPhaseId(gid);
    // A database this worker has no URL for: a worker that has it resolves it.
    if (!run || !known.has(run.database)) continue;
    try {
      const resolution = await resolvePrepared(pool, databases.pool(run.database), gid, run);
      logger.warn(
        { gid, shardId: run.shardId, database: run.database, resolution },
        resolution === 'committed'
          ? 'a two-phase external run left prepared (its worker stopped after the business commit) was committed: its marker is there'
          : resolution === 'rolled back'
            ? 'a two-phase external run left prepared (its worker stopped before the business commit) was rolled back: the shard runs again after its lease'
            : 'a two-phase external run left prepared was finished meanwhile by another worker',
      );
    } catch (err) {
      logger.warn(
        { gid, shardId: run.shardId, database: run.database, err: describeError(err) },
        'a two-phase external run is left prepared and its marker cannot be read now (business database down, or its run still holds the marker); its timeouts stay locked until the next try',
      );
    }
  }
}

/** The periodic resolver a worker runs beside its shards. */
export function preparedResolver(pool: pg.Pool, databases: BusinessDatabases, names: readonly string[], logger: Logger): Service {
  const known = new Set(names);
  return periodic(
    'prepared-resolver',
    RESOLVE_EVERY_MS,
    () => resolveLeftPrepared(pool, databases, known, logger),
    (err) => logger.warn({ err: describeError(err) }, 'looking for two-phase runs left prepared failed; retrying'),
  );
}
