// Health warnings an operator acts on before they become incidents, from PostgreSQL's own
// statistics (no extension needed: pgstattuple-free estimates):
// - bloat of the timeouts table and its indexes: the size the live rows need (average row width
//   from pg_stats, or index key width) against the size on disk;
// - autovacuum lag: dead tuples past autovacuum's own trigger point, and when it last ran;
// - the vacuum horizon: what keeps VACUUM from removing dead rows (a session with an old snapshot,
//   a standby's feedback, a replication slot, a forgotten prepared transaction), named with what to
//   do (vacuum-horizon.ts, docs/vacuum-horizon.md);
// - lag over the SLA per kind (paused kinds marked: their lag is expected);
// - a kind no live worker serves (its shards would wait in the stream);
// - an open circuit breaker (issue 9's table, when it exists);
// - timeouts dispatched to a finished shard, which no run will apply (a bug: stranded.sql).
import type { Queryable } from '../flow/kind-controls.js';
import { LIVE_WINDOW_S, openBreakers } from './overview.js';
import { readStranded, STRANDED_ADVICE } from './stranded.js';
import { blindMessage, HORIZON_DEFAULTS, horizonMessage, horizonSeverity, readHorizon, type HorizonLimits, type HorizonReading } from './vacuum-horizon.js';

export type Severity = 'warning' | 'critical';

export interface Warning {
  severity: Severity;
  topic: 'bloat' | 'autovacuum' | 'vacuum_horizon' | 'lag' | 'workers' | 'breaker' | 'stranded';
  message: string;
}

export interface RelationStats {
  name: string;
  kind: 'table' | 'index';
  bytes: number;
  /** Estimated bytes the live rows need; null when statistics are missing (never analyzed). */
  expectedBytes: number | null;
  /** 0..1, estimated share of the relation that is free or dead space. */
  bloatRatio: number | null;
}

export interface VacuumStats {
  liveTuples: number;
  deadTuples: number;
  /** Dead tuples at which autovacuum would start on this table. */
  autovacuumThreshold: number;
  lastVacuum: Date | null;
  lastAutovacuum: Date | null;
  lastAutoanalyze: Date | null;
  autovacuumCount: number;
}

export interface WarningsReport {
  warnings: Warning[];
  relations: RelationStats[];
  vacuum: VacuumStats | null;
  /** What holds back VACUUM in this database, oldest first (vacuum-horizon.ts). */
  horizon: HorizonReading;
}

/** Thresholds: above these a warning shows (critical at the second). */
export const LIMITS = {
  bloatRatio: [0.5, 0.8],
  /** Dead tuples this many times autovacuum's trigger point: it is not keeping up. */
  autovacuumBehind: [2, 10],
  /** Below this many dead tuples autovacuum lag is not worth a warning (small tables). */
  minDeadTuples: 10_000,
} as const;

const level = (value: number, [warn, crit]: readonly [number, number]): Severity | null => (value >= crit ? 'critical' : value >= warn ? 'warning' : null);

async function relations(db: Queryable): Promise<RelationStats[]> {
  // Table: live tuples x (row header 24 + item pointer 4 + average data width), at 100 % fill.
  // Index (btree): tuples x (index tuple header 8 + item pointer 4 + key width), at 90 % fill.
  const { rows } = await db.query<{ name: string; kind: 'table' | 'index'; bytes: number; expected: number | null }>(`
    WITH t AS (
      SELECT c.oid, c.relname, c.reltuples, pg_relation_size(c.oid)::int8 AS bytes
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = 'timeout_center' AND c.relname = 'timeouts'),
    width AS (
      SELECT sum(avg_width)::float8 AS w FROM pg_stats WHERE schemaname = 'timeout_center' AND tablename = 'timeouts')
    SELECT t.relname AS name, 'table' AS kind, t.bytes,
           CASE WHEN t.reltuples >= 0 AND (SELECT w FROM width) IS NOT NULL
                THEN (t.reltuples * (28 + (SELECT w FROM width)))::float8 END AS expected
      FROM t
    UNION ALL
    SELECT ic.relname, 'index', pg_relation_size(ic.oid)::int8,
           CASE WHEN ic.reltuples >= 0 THEN (ic.reltuples * (12 + coalesce(
             (SELECT sum(s.avg_width) FROM pg_attribute a JOIN pg_stats s
                 ON s.schemaname = 'timeout_center' AND s.tablename = 'timeouts' AND s.attname = a.attname
               WHERE a.attrelid = t.oid AND a.attnum = ANY (i.indkey::int2[])), 8)) / 0.9)::float8 END
      FROM t JOIN pg_index i ON i.indrelid = t.oid JOIN pg_class ic ON ic.oid = i.indexrelid
     ORDER BY kind DESC, name`);
  return rows.map((r) => {
    const bytes = Number(r.bytes);
    const expected = r.expected === null ? null : Number(r.expected);
    // Tiny relations are all page overhead: no ratio below 1 MB.
    const ratio = expected === null || bytes < 1_048_576 ? null : Math.max(0, 1 - expected / bytes);
    return { name: r.name, kind: r.kind, bytes, expectedBytes: expected, bloatRatio: ratio };
  });
}

async function vacuum(db: Queryable): Promise<VacuumStats | null> {
  const { rows } = await db.query<VacuumStats>(`
    SELECT s.n_live_tup::int8 AS "liveTuples", s.n_dead_tup::int8 AS "deadTuples",
           (current_setting('autovacuum_vacuum_threshold')::float8
             + current_setting('autovacuum_vacuum_scale_factor')::float8 * greatest(c.reltuples, 0))::int8 AS "autovacuumThreshold",
           s.last_vacuum AS "lastVacuum", s.last_autovacuum AS "lastAutovacuum", s.last_autoanalyze AS "lastAutoanalyze",
           s.autovacuum_count::int8 AS "autovacuumCount"
      FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
     WHERE s.schemaname = 'timeout_center' AND s.relname = 'timeouts'`);
  return rows[0] ?? null;
}

export async function collectWarnings(
  db: Queryable,
  opts: { lagSlaSeconds: number; horizon?: HorizonLimits | undefined; database?: string | undefined },
): Promise<WarningsReport> {
  const [rels, vac, horizon, lagging, unserved, breakers, stranded] = await Promise.all([
    relations(db),
    vacuum(db),
    readHorizon(db),
    db.query<{ kind: string; paused: boolean; lag: number }>(
      `SELECT b.kind, k.paused, extract(epoch FROM b.oldest_lag)::float8 AS lag
         FROM timeout_center.backlog b JOIN timeout_center.kinds k USING (kind)
        WHERE b.oldest_lag > make_interval(secs => $1) ORDER BY lag DESC`,
      [opts.lagSlaSeconds],
    ),
    db.query<{ kind: string; paused: boolean }>(
      `SELECT k.kind, k.paused FROM timeout_center.kinds k
        WHERE NOT EXISTS (SELECT 1 FROM timeout_center.workers w
                           WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - make_interval(secs => $1) AND k.kind = ANY (w.kinds))
        ORDER BY k.kind`,
      [LIVE_WINDOW_S],
    ),
    openBreakers(db),
    readStranded(db),
  ]);
  const warnings: Warning[] = [];
  for (const r of rels) {
    const sev = r.bloatRatio === null ? null : level(r.bloatRatio, LIMITS.bloatRatio);
    if (sev) {
      warnings.push({
        severity: sev,
        topic: 'bloat',
        message: `${r.kind} ${r.name}: about ${Math.round(r.bloatRatio! * 100)} % of its ${mb(r.bytes)} is dead or free space (live rows need ~${mb(r.expectedBytes!)}); VACUUM returns it to reuse, pg_repack or REINDEX CONCURRENTLY to the OS`,
      });
    }
  }
  if (vac && vac.autovacuumThreshold > 0 && vac.deadTuples >= LIMITS.minDeadTuples) {
    const behind = vac.deadTuples / vac.autovacuumThreshold;
    const sev = level(behind, LIMITS.autovacuumBehind);
    if (sev) {
      warnings.push({
        severity: sev,
        topic: 'autovacuum',
        message: `timeouts has ${vac.deadTuples} dead tuples, ${behind.toFixed(1)}x autovacuum's trigger point (${vac.autovacuumThreshold}); last autovacuum ${vac.lastAutovacuum ? vac.lastAutovacuum.toISOString() : 'never'}: check the xmin horizon and autovacuum_max_workers / cost limits`,
      });
    }
  }
  warnings.push(...horizonWarnings(opts.database ?? 'center', horizon, opts.horizon ?? HORIZON_DEFAULTS));
  for (const l of lagging.rows) {
    warnings.push({
      severity: l.paused ? 'warning' : 'critical',
      topic: 'lag',
      message: `${l.kind}: oldest due timeout is ${Math.round(l.lag)} s late, over the ${opts.lagSlaSeconds} s SLA${l.paused ? ' (the kind is paused: expected until it is resumed)' : ''}`,
    });
  }
  for (const u of unserved.rows) {
    warnings.push({
      severity: u.paused ? 'warning' : 'critical',
      topic: 'workers',
      message: `${u.kind}: no live worker serves this kind (none seen in the last ${LIVE_WINDOW_S} s with it in its kinds); its shards wait in the stream`,
    });
  }
  for (const st of stranded) {
    warnings.push({ severity: 'critical', topic: 'stranded', message: `${st.kind}: ${st.count} timeouts ${STRANDED_ADVICE}` });
  }
  for (const b of breakers) {
    warnings.push({
      severity: 'critical',
      topic: 'breaker',
      message: `${b.kind}: circuit breaker ${b.state}${b.target ? ` for ${b.target}` : ''}${b.worker ? ` on ${b.worker}` : ''} since ${b.changedAt ? b.changedAt.toISOString() : '?'}: its handler's target is failing`,
    });
  }
  return { warnings, relations: rels, vacuum: vac, horizon };
}

/** A warning per holder past the limits, and one when the role cannot see other sessions. */
export function horizonWarnings(database: string, horizon: HorizonReading, limits: HorizonLimits): Warning[] {
  const out: Warning[] = [];
  for (const h of horizon.holders) {
    const severity = horizonSeverity(h, limits);
    if (severity) out.push({ severity, topic: 'vacuum_horizon', message: horizonMessage(database, h) });
  }
  if (!horizon.seesAllSessions) out.push({ severity: 'warning', topic: 'vacuum_horizon', message: blindMessage(database, horizon) });
  return out;
}

/** "812 kB", "3.4 MB", "1.2 GB". */
export function formatBytes(bytes: number): string {
  if (bytes < 1_048_576) return `${Math.round(bytes / 1024)} kB`;
  if (bytes < 1_073_741_824) return `${(bytes / 1_048_576).toFixed(1)} MB`;
  return `${(bytes / 1_073_741_824).toFixed(1)} GB`;
}

const mb = formatBytes;
