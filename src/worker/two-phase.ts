// Two-phase commit for the external path (issue 32): the center's half of a shard run (claim and
// record, each timeout reached once, in one transaction) is PREPAREd before the business
// database's COMMIT and committed (COMMIT PREPARED) after it. The business database's marker
// (business-db.ts) is the decision: a prepared transaction whose run's marker committed there is
// committed; one whose marker did not is rolled back. This module holds the pieces both the run
// (external-executor.ts, runTwoPhase) and the resolver (prepared-resolver.ts) use: the global id,
// whether the center's server allows prepared transactions, and the resolution.
import type pg from 'pg';
import { pgErrorCode } from '../db/pool.js';
import { sql } from '../db/queries.js';
import { deleteMarker } from './business-db.js';
import type { ExternalTarget } from './handlers.js';

/** The prefix of every global id the center prepares (pg_prepared_xacts.gid). */
const PREFIX = 'tc-x:';

/** A prepared run: its shard, the lease token its marker carries, and the business database. */
export interface PreparedRun {
  shardId: number;
  leaseToken: string;
  database: string;
}

/** The global id of a run's prepared transaction: tc-x:<shard id>:<lease token>:<database>. A
 *  database name may hold ':', so it comes last. */
export function twoPhaseId(run: PreparedRun): string {
  return `${PREFIX}${run.shardId}:${run.leaseToken}:${run.database}`;
}

/** The run a global id names; undefined for one that is not the center's. */
export function parseTwoPhaseId(gid: string): PreparedRun | undefined {
  const m = /^tc-x:(\d+):([0-9a-f-]{36}):(.+)$/.exec(gid);
  if (!m) return undefined;
  const shardId = Number(m[1]);
  return Number.isSafeInteger(shardId) ? { shardId, leaseToken: m[2]!, database: m[3]! } : undefined;
}

/** A global id as an SQL literal (PREPARE TRANSACTION and COMMIT PREPARED take no parameters). */
export function gidLiteral(gid: string): string {
  return `'${gid.replace(/'/g, "''")}'`;
}

/** A kind whose first runs go in two phases where the center allows them: its handler runs in a
 *  business database (named, or picked by a routing rule). An HTTP handler has no transaction to
 *  prepare beside, and a code handler without a database runs in the center's. */
export function runsInTwoPhases(external: ExternalTarget): boolean {
  if (external.via === 'http') return false;
  return external.database !== undefined || (external.via === 'sql' && external.routed);
}

/** PostgreSQL's default is 0: no prepared transactions, and the external path commits first. */
export async function maxPreparedTransactions(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT current_setting('max_prepared_transactions') AS n`);
  return Number(rows[0]?.n ?? 0);
}

/** PREPARE TRANSACTION refused for a reason of the server, not of the run: prepared transactions
 *  are off (55000) or all max_prepared_transactions are in use (53400). */
export function isPrepareRefused(err: unknown): boolean {
  const code = pgErrorCode(err);
  return code === '55000' || code === '53400';
}

/**
 * COMMIT PREPARED or ROLLBACK PREPARED, outside any transaction (the pool's own connection).
 * 'gone' when no such prepared transaction exists (42704): another resolver, or the run itself,
 * finished it first.
 */
export async function finishPrepared(center: pg.Pool | pg.PoolClient, verb: 'COMMIT' | 'ROLLBACK', gid: string): Promise<'done' | 'gone'> {
  try {
    await center.query(`${verb} PREPARED ${gidLiteral(gid)}`);
    return 'done';
  } catch (err) {
    if (pgErrorCode(err) === '42704') return 'gone';
    throw err;
  }
}

/** The lease token of the resolver's fence (marker_tombstone.sql), never committed: no run has it. */
export const RESOLVER_FENCE = '00000000-0000-0000-0000-00000000000f';

export type Resolution = 'committed' | 'rolled back' | 'gone';

/**
 * Finishes a run's prepared center transaction by its marker in the business database. A fence
 * marker is inserted under the shard's id first, in a transaction of the resolver's own: it waits
 * for the run's business transaction if that one is still open (its own marker is uncommitted),
 * and once it is in, no run of the shard can commit there. Then:
 *   - the run's marker is there (its lease token): the business side committed: COMMIT PREPARED,
 *     and the marker is deleted, as the run would have;
 *   - no marker (the fence went in): nothing committed there, and nothing can while the fence is
 *     held: ROLLBACK PREPARED, then the fence is rolled back too (nothing is left behind: the
 *     shard's next run starts from nothing).
 * Throws when the business database cannot be reached or its run's transaction holds the marker
 * past lock_timeout (a frozen worker, until the server ends its idle session): the prepared
 * transaction stays, and the next resolution tries again.
 */
export async function resolvePrepared(center: pg.Pool, business: pg.Pool, gid: string, run: Pick<PreparedRun, 'shardId' | 'leaseToken'>): Promise<Resolution> {
  const client = await business.connect();
  let broken = false;
  try {
    await client.query(`BEGIN; SET LOCAL lock_timeout = '2s'`);
    const fenced = await client.query(sql('worker/marker_tombstone', { shardId: run.shardId, leaseToken: RESOLVER_FENCE }));
    if (fenced.rowCount === 1) {
      const out = await finishPrepared(center, 'ROLLBACK', gid);
      await client.query('ROLLBACK');
      return out === 'gone' ? 'gone' : 'rolled back';
    }
    const { rows } = await client.query<{ lease_token: string }>(sql('worker/marker_token', { shardId: run.shardId }));
    await client.query('ROLLBACK');
    const committed = rows[0]?.lease_token === run.leaseToken;
    const out = await finishPrepared(center, committed ? 'COMMIT' : 'ROLLBACK', gid);
    if (committed) await deleteMarker(business, run.shardId).catch(() => {});
    return out === 'gone' ? 'gone' : committed ? 'committed' : 'rolled back';
  } catch (err) {
    broken = true;
    throw err;
  } finally {
    client.release(broken);
  }
}
