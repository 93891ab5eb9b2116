// The cluster's oldest running transaction, for tests that read what the claim floors' marks allow
// (sql/0030): a floor passes the rows claimed before a mark only once every transaction older than
// that mark has ended, in any database of the cluster, and the test files beside this one (a
// prepared transaction in vacuum-horizon.test.ts, a migrate's long step) hold such transactions.
import type pg from 'pg';

/** Waits until every transaction that began writing before `xid` has ended, anywhere in the
 *  cluster (pg_snapshot_xmin passes it); throws after `ms`. */
export async function waitHorizonPast(pool: pg.Pool, xid: string, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const { rows } = await pool.query<{ past: boolean }>('SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8 AS past', [xid]);
    if (rows[0]!.past) return;
    if (Date.now() > deadline) throw new Error(`a transaction older than ${xid} still runs in the cluster after ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
