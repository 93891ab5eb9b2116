// A kysely instance or transaction seen as a pg Queryable, so recordAudit() (pg style) writes its
// audit row inside the same transaction as the change it records.
import { CompiledQuery, type Kysely } from 'kysely';
import type pg from 'pg';
import type { Database } from '../db/schema.js';
import type { Queryable } from '../flow/kind-controls.js';

export function queryable(db: Kysely<Database>): Queryable {
  return {
    async query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
      const r = await db.executeQuery<R>(CompiledQuery.raw(text, values ?? []));
      return { rows: r.rows, rowCount: Number(r.numAffectedRows ?? r.rows.length), command: '', oid: 0, fields: [] };
    },
  };
}
