// Timeouts dispatched to a shard that is already finished (stranded.sql): no run will apply them.
// Read by each leader's lag check (gauge and alert), by status and by the console's warnings.
import { statement } from '../db/queries.js';
import type { Queryable } from '../flow/kind-controls.js';

export interface Stranded {
  kind: string;
  count: number;
}

/** What every message about them says after the count: what it means and what to do. */
export const STRANDED_ADVICE =
  'are dispatched to a finished shard: no run will apply them. Return them to pending (docs/operations.md "Stranded timeouts"; the next scan closes them) and report it';

/** The stranded timeouts of this database, per kind (none: []). */
export async function readStranded(db: Queryable): Promise<Stranded[]> {
  const { rows } = await db.query<{ kind: string; stranded: number }>(statement('coordinator/stranded'));
  return rows.map((r) => ({ kind: r.kind, count: r.stranded }));
}
