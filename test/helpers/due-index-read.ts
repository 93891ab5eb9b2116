// What one statement reads of the due index (timeouts_due_by_key). The claim reads its fresh rows
// through a function planned by itself (sql/0052), so its index scan is not a node of the
// statement's plan; the index's own counter (idx_tup_read, this transaction's) sees it wherever
// it runs.
import type pg from 'pg';

export interface DueIndexRead {
  /** Entries of timeouts_due_by_key the statement read (live, dead and locked alike). */
  entries: number;
  /** Blocks the statement wrote to temporary files (a sort that spilled to disk). */
  tempBlocks: number;
}

/** Entries of timeouts_due_by_key read so far in the client's transaction (idx_tup_read, this
 *  transaction's): take it before and after a statement, in the same transaction. */
export async function dueIndexEntriesSoFar(client: pg.ClientBase): Promise<number> {
  return (await timeoutsIndexEntriesSoFar(client))['timeouts_due_by_key']!;
}

/** Runs text under EXPLAIN (ANALYZE, BUFFERS) in a transaction that is rolled back after. */
export async function dueIndexRead(pool: pg.Pool, text: string, values: unknown[]): Promise<DueIndexRead> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const before = await dueIndexEntriesSoFar(client);
    const { rows } = await client.query({ text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, values });
    const plan = (rows[0]['QUERY PLAN'] as { Plan: Record<string, number> }[])[0]!.Plan;
    return { entries: (await dueIndexEntriesSoFar(client)) - before, tempBlocks: plan['Temp Written Blocks'] ?? 0 };
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
}

/** Entries read so far in the client's transaction from every index of timeout_center.timeouts
 *  (idx_tup_read, this transaction's), by index: what a statement read wherever its plan went. */
export async function timeoutsIndexEntriesSoFar(client: pg.ClientBase): Promise<Record<string, number>> {
  const { rows } = await client.query<{ name: string; n: string }>(
    `SELECT c.relname AS name, pg_stat_get_xact_tuples_returned(i.indexrelid)::text AS n
       FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE i.indrelid = 'timeout_center.timeouts'::regclass`,
  );
  return Object.fromEntries(rows.map((r) => [r.name, Number(r.n)]));
}

/** Runs a statement in a transaction rolled back after; returns the entries it read from each index
 *  of timeout_center.timeouts (those it read none of left out). */
export async function timeoutsIndexEntriesRead(pool: pg.Pool, statement: { text: string; values: unknown[] }): Promise<Record<string, number>> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const before = await timeoutsIndexEntriesSoFar(client);
    await client.query(statement);
    const after = await timeoutsIndexEntriesSoFar(client);
    return Object.fromEntries(Object.entries(after).flatMap(([k, n]) => (n - (before[k] ?? 0) > 0 ? [[k, n - (before[k] ?? 0)]] : [])));
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
}
