// Flow control per kind, changed at run time: pause, resume, and the fleet-wide limits (running
// shards at once, timeouts per second). One module for every entry point (CLI, console, API), so
// each change is validated the same way and audited with its actor (sql/0006_flow_control.sql:
// the kinds_controls_audit trigger writes timeout_center.audit_log from the session's
// timeout_center.actor setting, which these functions set for their own transaction).
import { InputError } from '../input-error.js';
import type pg from 'pg';
import { sql } from '../db/queries.js';

/** Anything that can run a query: a pg Pool or a connected Client. */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

export interface KindControls {
  kind: string;
  paused: boolean;
  /** Shards of the kind queued or running at once, fleet-wide; null: no cap. */
  maxRunningShards: number | null;
  /** Timeouts per second, fleet-wide; null: no limit. */
  rateLimit: number | null;
  /** 'config' while the config file's values apply, 'operator' after a run-time change. */
  source: 'config' | 'operator';
  changedBy: string | null;
  changedAt: Date | null;
  runningShards: number;
  queuedShards: number;
  /** The config file's values (sql/0008): what `limit <kind> --reset` restores. */
  config: { paused: boolean; maxRunningShards: number | null; rateLimit: number | null };
}

/** A change that names an unknown kind or an invalid limit: nothing was changed. */
export class ControlInputError extends InputError {
  override name = 'ControlInputError';
}

export interface LimitChange {
  /** A positive integer, or null to remove the cap. Left out: unchanged. */
  maxRunningShards?: number | null;
  /** Timeouts per second (> 0), or null to remove the limit. Left out: unchanged. */
  rateLimit?: number | null;
}

interface ControlRow {
  kind: string;
  paused: boolean;
  max_running_shards: number | null;
  rate_limit: string | null;
  controls_source: 'config' | 'operator';
  controls_changed_by: string | null;
  controls_changed_at: Date | null;
  running_shards: number;
  queued_shards: number;
  config_paused: boolean;
  config_max_running_shards: number | null;
  config_rate_limit: string | null;
}

function toControls(r: ControlRow): KindControls {
  return {
    kind: r.kind,
    paused: r.paused,
    maxRunningShards: r.max_running_shards,
    rateLimit: r.rate_limit === null ? null : Number(r.rate_limit),
    source: r.controls_source,
    changedBy: r.controls_changed_by,
    changedAt: r.controls_changed_at,
    runningShards: r.running_shards,
    queuedShards: r.queued_shards,
    config: {
      paused: r.config_paused,
      maxRunningShards: r.config_max_running_shards,
      rateLimit: r.config_rate_limit === null ? null : Number(r.config_rate_limit),
    },
  };
}

/** Every kind's controls and what of it is running now (the kind_controls view). */
export async function listKindControls(db: Queryable): Promise<KindControls[]> {
  const { text, values } = sql('flow/kind_controls');
  const { rows } = await db.query<ControlRow>(text, values);
  return rows.map(toControls);
}

export function checkActor(actor: string): void {
  if (actor.trim().length === 0 || actor.length > 200)
    throw new ControlInputError('actor must be 1 to 200 characters (who made the change, for the audit log)');
}

function checkLimits(change: LimitChange): void {
  const { maxRunningShards, rateLimit } = change;
  if (
    maxRunningShards !== undefined &&
    maxRunningShards !== null &&
    !(Number.isInteger(maxRunningShards) && maxRunningShards > 0 && maxRunningShards <= 100_000)
  ) {
    throw new ControlInputError(`max running shards must be a whole number from 1 to 100000 (or none), got ${String(maxRunningShards)}`);
  }
  if (rateLimit !== undefined && rateLimit !== null && !(Number.isFinite(rateLimit) && rateLimit > 0 && rateLimit <= 10_000_000)) {
    throw new ControlInputError(`rate limit must be a number of timeouts per second above 0 (at most 10000000), or none; got ${String(rateLimit)}`);
  }
  if (maxRunningShards === undefined && rateLimit === undefined)
    throw new ControlInputError('nothing to change: give a max running shards and/or a rate limit');
}

/** What one change of a kind's controls sets; a field left out stays as it is. reset: back to the
 *  config's values (config_*). */
interface ControlsChange {
  paused?: boolean;
  maxRunningShards?: number | null;
  rateLimit?: number | null;
  reset?: boolean;
}

/**
 * One audited UPDATE of a kind's controls in its own transaction (the actor is set with
 * set_config(..., true), local to it): set_kind_controls.sql, one fixed statement for every
 * change. Throws ControlInputError for an unknown kind.
 */
async function updateControls(
  pool: pg.Pool,
  kind: string,
  actor: string,
  change: ControlsChange,
  source: 'config' | 'operator' = 'operator',
): Promise<KindControls> {
  checkActor(actor);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SELECT set_config('timeout_center.actor', $1, true)`, [actor]);
    const { rowCount } = await client.query(
      sql('flow/set_kind_controls', {
        kind,
        paused: change.paused ?? null,
        setMaxRunningShards: change.maxRunningShards !== undefined,
        maxRunningShards: change.maxRunningShards ?? null,
        setRateLimit: change.rateLimit !== undefined,
        rateLimit: change.rateLimit ?? null,
        reset: change.reset ?? false,
        source,
      }),
    );
    if (rowCount === 0) {
      const { rows } = await client.query<{ kind: string }>(sql('flow/kind_names'));
      throw new ControlInputError(
        `unknown kind ${JSON.stringify(kind)}; known kinds: ${rows.map((r) => r.kind).join(', ') || '(none: run timeout-center migrate)'}`,
      );
    }
    const { rows } = await client.query<ControlRow>(sql('flow/kind_control', { kind }));
    await client.query('COMMIT');
    return toControls(rows[0]!);
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** Pauses a kind fleet-wide: within a tick nothing of it starts; running shards finish. */
export function pauseKind(pool: pg.Pool, kind: string, actor: string): Promise<KindControls> {
  return updateControls(pool, kind, actor, { paused: true });
}

export function resumeKind(pool: pg.Pool, kind: string, actor: string): Promise<KindControls> {
  return updateControls(pool, kind, actor, { paused: false });
}

/** Sets a kind's fleet-wide limits; null removes a limit, a field left out stays as it is. */
export function setKindLimits(pool: pg.Pool, kind: string, change: LimitChange, actor: string): Promise<KindControls> {
  checkLimits(change);
  return updateControls(pool, kind, actor, { maxRunningShards: change.maxRunningShards, rateLimit: change.rateLimit });
}

/**
 * Puts a kind back on its config file's values (paused, limits: the config_* columns every process
 * start writes) and lets later config changes apply again at the next start (controls_source
 * 'config'). Audited like any change of controls.
 */
export function resetKindControls(pool: pg.Pool, kind: string, actor: string): Promise<KindControls> {
  return updateControls(pool, kind, actor, { reset: true }, 'config');
}

/** Records an operator action other than a change of controls (retry, cancel, rerun_shard, ...). */
export async function recordAudit(
  db: Queryable,
  entry: { actor: string; action: string; kind?: string | null; target?: string | null; details?: Record<string, unknown> },
): Promise<void> {
  checkActor(entry.actor);
  const { text, values } = sql('flow/audit', {
    actor: entry.actor,
    action: entry.action,
    kind: entry.kind ?? null,
    target: entry.target ?? null,
    details: JSON.stringify(entry.details ?? {}),
  });
  await db.query(text, values);
}
