// Writes the routing rules of kinds whose SQL handler runs in business databases into
// timeout_center.kind_routes (sql/0005), where timeout_center.target_of() reads them: the map
// and the external claim place each biz_id with the same rule. Kinds without a rule lose theirs.
import type pg from 'pg';
import type { Config } from '../config.js';

interface RouteRow {
  kind: string;
  by: 'database' | 'modulo' | 'hash' | 'range';
  databases: string[];
  from: string[] | null;
  to: string[] | null;
}

export function routeRows(kinds: Config['kinds']): RouteRow[] {
  const out: RouteRow[] = [];
  for (const [kind, k] of Object.entries(kinds)) {
    const h = k.handler;
    if (h.type !== 'sql') continue;
    if (h.database) out.push({ kind, by: 'database', databases: [h.database], from: null, to: null });
    else if (h.route?.by === 'range') {
      // Sorted by from: the SQL rule finds the range with width_bucket.
      const ranges = [...h.route.ranges].sort((a, b) => a.from - b.from);
      out.push({ kind, by: 'range', databases: ranges.map((r) => r.database), from: ranges.map((r) => String(r.from)), to: ranges.map((r) => String(r.to)) });
    } else if (h.route) out.push({ kind, by: h.route.by, databases: h.route.databases, from: null, to: null });
  }
  return out;
}

export async function syncRoutes(pool: pg.Pool, kinds: Config['kinds']): Promise<void> {
  const rows = routeRows(kinds);
  await pool.query(
    `WITH wanted AS (
       SELECT r.kind, r.route_by, (SELECT array_agg(x ORDER BY o) FROM jsonb_array_elements_text(r.databases) WITH ORDINALITY e (x, o)) AS databases,
              (SELECT array_agg(x::bigint ORDER BY o) FROM jsonb_array_elements_text(r.range_from) WITH ORDINALITY e (x, o)) AS range_from,
              (SELECT array_agg(x::bigint ORDER BY o) FROM jsonb_array_elements_text(r.range_to) WITH ORDINALITY e (x, o)) AS range_to
         FROM jsonb_to_recordset($1::jsonb) AS r (kind text, route_by text, databases jsonb, range_from jsonb, range_to jsonb)
     ), dropped AS (
       DELETE FROM timeout_center.kind_routes k WHERE k.kind = ANY ($2::text[]) AND NOT EXISTS (SELECT 1 FROM wanted w WHERE w.kind = k.kind)
     )
     INSERT INTO timeout_center.kind_routes AS k (kind, route_by, databases, range_from, range_to)
     SELECT kind, route_by, databases, range_from, range_to FROM wanted
     ON CONFLICT (kind) DO UPDATE SET route_by = EXCLUDED.route_by, databases = EXCLUDED.databases,
       range_from = EXCLUDED.range_from, range_to = EXCLUDED.range_to, updated_at = now()
     WHERE (k.route_by, k.databases, k.range_from, k.range_to) IS DISTINCT FROM (EXCLUDED.route_by, EXCLUDED.databases, EXCLUDED.range_from, EXCLUDED.range_to)`,
    [JSON.stringify(rows.map((r) => ({ kind: r.kind, route_by: r.by, databases: r.databases, range_from: r.from, range_to: r.to }))), Object.keys(kinds)],
  );
}
