// Writes the routing rules of kinds whose SQL handler runs in business databases into
// timeout_center.kind_routes (sql/0005), where timeout_center.target_of() reads them: the map
// and the external claim place each biz_id with the same rule. Kinds without a rule lose theirs.
import type pg from 'pg';
import type { Config } from '../config.js';
import { sql } from './queries.js';

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
    sql('db/sync_routes', {
      routes: JSON.stringify(rows.map((r) => ({ kind: r.kind, route_by: r.by, databases: r.databases, range_from: r.from, range_to: r.to }))),
      kinds: Object.keys(kinds),
    }),
  );
}
