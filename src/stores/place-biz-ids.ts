// Where an operator's action on a business object goes (docs/scale.md "Acting across stores"): a
// kind stored beside its orders keeps each timeout in the store its route picks for the biz_id;
// the rule comes from the config and is evaluated by the database's own route_target (sql/0005),
// the function the insert check uses, so the CLI never disagrees with the store about a row.
import type pg from 'pg';
import type { Config } from '../config.js';
import { sql } from '../db/queries.js';
import { routeRows } from '../db/routes.js';

/** A placement: business ids per store, and those the rule cannot place (with modulo/range: not
 *  an integer, or outside every range). */
export interface Placement {
  byStore: Map<string, string[]>;
  unroutable: string[];
}

/** Places bizIds of a beside kind with its rule, in any database that has the schema; undefined
 *  for a kind of the center. */
export async function placeBizIds(pool: pg.Pool, kinds: Config['kinds'], kind: string, bizIds: string[]): Promise<Placement | undefined> {
  const rule = routeRows(kinds, 'beside').find((r) => r.kind === kind);
  if (!rule) return undefined;
  const { rows } = await pool.query<{ biz_id: string; store: string | null }>(
    sql('stores/place_biz_ids', { by: rule.by, databases: rule.databases, from: rule.from, to: rule.to, bizIds }),
  );
  const out: Placement = { byStore: new Map(), unroutable: [] };
  for (const r of rows) {
    if (r.store === null || r.store === '-unroutable') out.unroutable.push(r.biz_id);
    else out.byStore.set(r.store, [...(out.byStore.get(r.store) ?? []), r.biz_id]);
  }
  return out;
}
