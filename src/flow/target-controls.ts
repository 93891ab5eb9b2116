// Flow control per business database, changed at run time: the fleet-wide rate limit of one
// target (shards.target), over all kinds whose shards run against it. One module for every entry
// point (CLI, console), so each change is validated the same way and audited with its actor (the
// targets_controls_audit trigger of sql/0009 writes timeout_center.audit_log from the session's
// timeout_center.actor setting, set here for the change's own transaction).
import type pg from 'pg';
import { sql } from '../db/queries.js';
import { checkActor, ControlInputError, type Queryable } from './kind-controls.js';

export interface TargetControls {
  /** The business database's name (businessDatabases.<name>, shards.target). */
  target: string;
  /** Timeouts per second against this database, over all kinds, fleet-wide; null: no limit. */
  rateLimit: number | null;
  /** 'config' while the config file's value applies, 'operator' after a run-time change. */
  source: 'config' | 'operator';
  changedBy: string | null;
  changedAt: Date | null;
  /** Kinds whose handlers run in this database (their routing rules name it). */
  kinds: string[];
  runningShards: number;
  queuedShards: number;
  /** Timeouts the shards queued or running against it may claim (the map keeps this under one
   *  second's worth of the limit). */
  inFlightLimit: number;
  /** The config file's value: what `limit --database <name> --reset` restores. */
  config: { rateLimit: number | null };
}

interface TargetRow {
  target: string;
  rate_limit: string | null;
  controls_source: 'config' | 'operator';
  controls_changed_by: string | null;
  controls_changed_at: Date | null;
  config_rate_limit: string | null;
  kinds: string[];
  running_shards: number;
  queued_shards: number;
  in_flight_limit: string;
}

const num = (v: string | null): number | null => (v === null ? null : Number(v));

function toControls(r: TargetRow): TargetControls {
  return {
    target: r.target,
    rateLimit: num(r.rate_limit),
    source: r.controls_source,
    changedBy: r.controls_changed_by,
    changedAt: r.controls_changed_at,
    kinds: r.kinds,
    runningShards: r.running_shards,
    queuedShards: r.queued_shards,
    inFlightLimit: Number(r.in_flight_limit),
    config: { rateLimit: num(r.config_rate_limit) },
  };
}

/** Every business database's controls and what runs against it now (the target_controls view). */
export async function listTargetControls(db: Queryable): Promise<TargetControls[]> {
  const { text, values } = sql('flow/target_controls');
  const { rows } = await db.query<TargetRow>(text, values);
  return rows.map(toControls);
}

function checkRate(rateLimit: number | null): void {
  if (rateLimit !== null && !(Number.isFinite(rateLimit) && rateLimit > 0 && rateLimit <= 10_000_000)) {
    throw new ControlInputError(`rate limit must be a number of timeouts per second above 0 (at most 10000000), or none; got ${String(rateLimit)}`);
  }
}

/** One audited UPDATE of a target's row in its own transaction (set_target_rate.sql): a new rate
 *  limit, or reset to the config's. Throws ControlInputError for an unknown business database. */
async function updateTarget(
  pool: pg.Pool,
  target: string,
  actor: string,
  change: { rateLimit: number | null } | { reset: true },
  source: 'config' | 'operator',
): Promise<TargetControls> {
  checkActor(actor);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SELECT set_config('timeout_center.actor', $1, true)`, [actor]);
    const reset = 'reset' in change;
    const { rowCount } = await client.query(sql('flow/set_target_rate', { target, rateLimit: reset ? null : change.rateLimit, reset, source }));
    if (rowCount === 0) {
      const { rows } = await client.query<{ target: string }>(sql('flow/target_names'));
      throw new ControlInputError(
        `unknown business database ${JSON.stringify(target)}; known: ${rows.map((r) => r.target).join(', ') || '(none: declare businessDatabases in the config and run timeout-center migrate)'}`,
      );
    }
    const { rows } = await client.query<TargetRow>(sql('flow/target_control', { target }));
    await client.query('COMMIT');
    return toControls(rows[0]!);
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** Sets a business database's fleet-wide rate limit (null removes it); applies within a tick. */
export function setTargetRateLimit(pool: pg.Pool, target: string, rateLimit: number | null, actor: string): Promise<TargetControls> {
  checkRate(rateLimit);
  return updateTarget(pool, target, actor, { rateLimit }, 'operator');
}

/** Puts a business database back on its config file's rate limit (config_rate_limit, written at
 *  every process start); later config changes apply again at the next start. Audited. */
export function resetTargetControls(pool: pg.Pool, target: string, actor: string): Promise<TargetControls> {
  return updateTarget(pool, target, actor, { reset: true }, 'config');
}
