// The vacuum horizon of one database (docs/vacuum-horizon.md): what holds back VACUUM there (a
// session with an old snapshot, a standby's feedback, a replication slot, a prepared transaction
// left behind), how old each one is, and what an operator does about it. One reading serves the
// metrics (horizon-watch.ts), `timeout-center status` and the console's warnings, so they say the
// same thing in the same words.
import type { Queryable } from '../flow/kind-controls.js';
import { sql } from '../db/queries.js';

export type HorizonHolderKind = 'backend' | 'standby_feedback' | 'replication_slot' | 'prepared_transaction';

/** One thing that holds the horizon. */
export interface HorizonHolder {
  holder: HorizonHolderKind;
  /** The backend's or WAL sender's pid; a slot's active_pid; null for a prepared transaction. */
  pid: number | null;
  applicationName: string | null;
  /** The session's role (a prepared transaction's owner). */
  user: string | null;
  /** pg_stat_activity.state (active, idle in transaction, ...); a slot: active or inactive. */
  state: string | null;
  backendType: string | null;
  xactStart: Date | null;
  queryStart: Date | null;
  /** The session's current or last statement (first 500 characters); null when not visible. */
  query: string | null;
  clientAddr: string | null;
  slot: string | null;
  slotType: string | null;
  gid: string | null;
  preparedAt: Date | null;
  /** What it holds: 'all tables' of this database, 'every database' of the server, or only the
   *  'system catalogs' (a logical slot's catalog_xmin). */
  scope: string;
  /** Transactions since its horizon (age(xmin)). */
  xidAge: number;
  /** Seconds since it began, where PostgreSQL knows (xact_start, prepared); else null. */
  seconds: number | null;
}

export interface HorizonReading {
  /** Oldest first (by transactions). */
  holders: HorizonHolder[];
  /** The role this reading ran as. */
  role: string;
  /** False when the role lacks pg_read_all_stats (pg_monitor): other roles' sessions are hidden,
   *  so a backend holder may be missing. */
  seesAllSessions: boolean;
}

/** When a holder is worth a warning. */
export interface HorizonLimits {
  /** Warn when a holder whose start is known is older than this (seconds). */
  warnSeconds: number;
  /** Warn when a holder whose start is not known (a slot, a standby) is older than this
   *  (transactions). */
  warnXids: number;
  /** Critical when older than this (seconds). */
  criticalSeconds: number;
  /** Critical at this age in transactions, whatever else is known: on the way to wraparound. */
  criticalXids: number;
}

/** The defaults (alerts.vacuumHorizonMs / vacuumHorizonXids): 5 minutes, so a nightly pg_dump of a
 *  large database, a report left open or a forgotten session warns; 10 million transactions for
 *  a slot or standby (hours on a busy server; their start time is unknown). Critical at an hour
 *  or 100 million transactions (half of autovacuum_freeze_max_age's default). */
export const HORIZON_DEFAULTS: HorizonLimits = {
  warnSeconds: 300,
  warnXids: 10_000_000,
  criticalSeconds: 3600,
  criticalXids: 100_000_000,
};

/** The limits from the config's alerts section (critical stays at 12x the warning, at least an hour). */
export function horizonLimits(alerts: { vacuumHorizonMs: number; vacuumHorizonXids: number }): HorizonLimits {
  const warnSeconds = alerts.vacuumHorizonMs / 1000;
  return {
    warnSeconds,
    warnXids: alerts.vacuumHorizonXids,
    criticalSeconds: Math.max(HORIZON_DEFAULTS.criticalSeconds, warnSeconds * 12),
    criticalXids: Math.max(HORIZON_DEFAULTS.criticalXids, alerts.vacuumHorizonXids * 10),
  };
}

interface HolderRow {
  holder: HorizonHolderKind;
  pid: number | null;
  application_name: string | null;
  user_name: string | null;
  state: string | null;
  backend_type: string | null;
  xact_start: Date | null;
  query_start: Date | null;
  query: string | null;
  client_addr: string | null;
  slot: string | null;
  slot_type: string | null;
  scope: string;
  gid: string | null;
  prepared_at: Date | null;
  xid_age: string | number;
  seconds: number | null;
}

/** Reads what holds the horizon of the database `db` is connected to. */
export async function readHorizon(db: Queryable): Promise<HorizonReading> {
  const holders = sql('operations/vacuum_horizon');
  const visibility = sql('operations/horizon_visibility');
  const [h, v] = await Promise.all([
    db.query<HolderRow>(holders.text, holders.values),
    db.query<{ role: string; sees_all: boolean }>(visibility.text, visibility.values),
  ]);
  return {
    role: v.rows[0]!.role,
    seesAllSessions: v.rows[0]!.sees_all,
    holders: h.rows.map((r) => ({
      holder: r.holder,
      pid: r.pid,
      applicationName: r.application_name,
      user: r.user_name,
      state: r.state,
      backendType: r.backend_type,
      xactStart: r.xact_start,
      queryStart: r.query_start,
      query: r.query,
      clientAddr: r.client_addr,
      slot: r.slot,
      slotType: r.slot_type,
      gid: r.gid,
      preparedAt: r.prepared_at,
      scope: r.scope,
      xidAge: Number(r.xid_age),
      seconds: r.seconds,
    })),
  };
}

export type HorizonSeverity = 'warning' | 'critical';

/** How bad a holder is under the limits; null: not worth a warning. */
export function horizonSeverity(h: HorizonHolder, limits: HorizonLimits): HorizonSeverity | null {
  if (h.xidAge >= limits.criticalXids || (h.seconds !== null && h.seconds >= limits.criticalSeconds)) return 'critical';
  if (h.seconds !== null ? h.seconds >= limits.warnSeconds : h.xidAge >= limits.warnXids) return 'warning';
  return null;
}

/** The oldest holder of each kind (the metrics export these). */
export function oldestByKind(holders: HorizonHolder[]): HorizonHolder[] {
  const out = new Map<HorizonHolderKind, HorizonHolder>();
  for (const h of holders) {
    const seen = out.get(h.holder);
    if (!seen || h.xidAge > seen.xidAge) out.set(h.holder, h);
  }
  return [...out.values()];
}

/** "backend pid 4242 (pg_dump, idle in transaction)", "replication slot standby_1 (physical,
 *  inactive)", "prepared transaction 'tc-x:12'", "standby feedback pid 77 (walreceiver)". */
export function describeHolder(h: HorizonHolder): string {
  const app = h.applicationName ?? h.backendType ?? 'no application_name';
  switch (h.holder) {
    case 'backend':
      return `backend pid ${h.pid} (${app}, ${h.user ?? '?'}, ${h.state ?? 'state hidden'}${h.queryStart ? `, query since ${h.queryStart.toISOString()}` : ''})`;
    case 'standby_feedback':
      return `standby feedback from pid ${h.pid} (${h.applicationName ?? 'standby'}${h.clientAddr ? ` at ${h.clientAddr}` : ''})`;
    case 'replication_slot':
      return `replication slot ${h.slot} (${h.slotType ?? '?'}, ${h.state ?? '?'}${h.pid ? `, pid ${h.pid}` : ''})`;
    case 'prepared_transaction':
      return `prepared transaction '${h.gid}' (owner ${h.user ?? '?'}, prepared ${h.preparedAt ? h.preparedAt.toISOString() : '?'})`;
  }
}

/** What an operator does about it. */
export function horizonAdvice(h: HorizonHolder): string {
  switch (h.holder) {
    case 'backend':
      return `if it is a forgotten session or a report that can wait, end it: SELECT pg_terminate_backend(${h.pid}); a pg_dump: run it from a standby or at a quieter hour`;
    case 'standby_feedback':
      return 'a long query on that standby holds it (hot_standby_feedback): cancel the query there, or turn hot_standby_feedback off and accept query conflicts on the standby';
    case 'replication_slot':
      return h.slotType === 'logical'
        ? `the subscriber of slot ${h.slot} is behind or gone: check the subscriber; if it is gone for good, SELECT pg_drop_replication_slot('${h.slot}')`
        : `the standby of slot ${h.slot} is behind or gone: check it; if it is gone for good, SELECT pg_drop_replication_slot('${h.slot}')`;
    case 'prepared_transaction':
      return h.gid?.startsWith('tc-x:')
        ? `a timeout-center two-phase run left prepared: its resolver commits or rolls it back (docs/operations.md); by hand: ROLLBACK PREPARED '${h.gid}' or COMMIT PREPARED '${h.gid}'`
        : `its coordinator died between PREPARE and COMMIT: find it, or resolve it by hand: COMMIT PREPARED '${h.gid}' or ROLLBACK PREPARED '${h.gid}'`;
  }
}

/** "40 s", "12 min 5 s", "5 min", "3 h 20 min". */
export function formatAge(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const two = (big: number, bigUnit: string, small: number, smallUnit: string) => (small > 0 ? `${big} ${bigUnit} ${small} ${smallUnit}` : `${big} ${bigUnit}`);
  if (s < 3600) return two(Math.floor(s / 60), 'min', s % 60, 's');
  if (s < 86_400) return two(Math.floor(s / 3600), 'h', Math.floor((s % 3600) / 60), 'min');
  return two(Math.floor(s / 86_400), 'd', Math.floor((s % 86_400) / 3600), 'h');
}

/** One line naming the holder, its age and what to do, for status, the console and alerts. */
export function horizonMessage(database: string, h: HorizonHolder): string {
  const xids = `${h.xidAge.toLocaleString('en-US')} transactions`;
  const age = h.seconds !== null ? `${formatAge(h.seconds)} (${xids})` : xids;
  const scope =
    h.scope === 'system catalogs'
      ? ' (the system catalogs only: a logical slot; it also keeps WAL)'
      : h.scope === 'every database'
        ? ' (every database of the server)'
        : '';
  return `${database}: ${describeHolder(h)} has held back VACUUM for ${age}${scope}: rows deleted since stay on disk and the queue slows while it lasts; ${horizonAdvice(h)}`;
}

/** The warning of a role that cannot see other roles' sessions. */
export function blindMessage(database: string, reading: HorizonReading): string {
  return `${database}: role ${reading.role} cannot see other roles' sessions (no pg_read_all_stats): a session holding the vacuum horizon may be hidden; GRANT pg_monitor TO ${reading.role}`;
}
