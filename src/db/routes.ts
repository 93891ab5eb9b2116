// Writes the routing rules of kinds whose SQL handler runs in business databases into
// timeout_center.kind_routes (sql/0005), where timeout_center.target_of() reads them: the map
// and the external claim place each biz_id with the same rule. Kinds without a rule lose theirs.
// The rule of a kind stored beside its orders (`store: beside`) places its timeouts instead: it
// goes to timeout_center.kind_stores (sql/0014), where the insert check reads it, and such a kind
// runs the same-database path in its store, not the external path.
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

export function routeRows(kinds: Config['kinds'], stored: 'center' | 'beside' = 'center'): RouteRow[] {
  const out: RouteRow[] = [];
  for (const [kind, k] of Object.entries(kinds)) {
    if (k.store !== stored) continue;
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

const asJson = (rows: RouteRow[]) =>
  JSON.stringify(rows.map((r) => ({ kind: r.kind, route_by: r.by, databases: r.databases, range_from: r.from, range_to: r.to })));

/** Both rule tables: kind_routes (the external path) and kind_stores (kinds stored beside). */
export async function syncRoutes(pool: pg.Pool, kinds: Config['kinds']): Promise<void> {
  await pool.query(sql('db/sync_routes', { routes: asJson(routeRows(kinds, 'center')), kinds: Object.keys(kinds) }));
  await pool.query(sql('db/sync_stores', { routes: asJson(routeRows(kinds, 'beside')), kinds: Object.keys(kinds) }));
}
