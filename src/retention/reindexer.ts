// The reindexer: rebuilds the indexes of timeout_center.timeouts that an old snapshot left far
// larger than their entries need (River's reindexer, Oban's Reindexer plugin). While a snapshot
// anywhere in the database is old, VACUUM cannot remove the rows claimed since it was taken: the
// table and its indexes grow with every claim (docs/vacuum-horizon-figures.md). Once it ends,
// autovacuum frees that space and the table's end is truncated as it empties, but a B-tree keeps
// the size it reached. So, every REINDEX_CHECK_MS while this coordinator leads, each index larger
// than REINDEX_MIN_BYTES and REINDEX_FACTOR times what its entries need (bloated_indexes.sql) is
// rebuilt with REINDEX INDEX CONCURRENTLY: writers and claims go on meanwhile (it takes SHARE
// UPDATE EXCLUSIVE on the table, as VACUUM does), and its build reads only the live entries.
//
// Never while a snapshot older than REINDEX_QUIET_S is held in the database (oldest_snapshot.sql):
// REINDEX CONCURRENTLY waits for such transactions to end, and keeps autovacuum off the table
// meanwhile. An index a failed rebuild left INVALID (<name>_ccnew, _ccold) is dropped first. A
// short lock_timeout: a rebuild that cannot have its lock now is tried at the next check.
import type pg from 'pg';
import type { Logger } from 'pino';
import { sql } from '../db/queries.js';
import { layoutOf } from '../db/citus-layout.js';
import { BaseService, periodic, type Service } from '../service.js';

/** How often the leader looks at the indexes' sizes. */
export const REINDEX_CHECK_MS = 60_000;
/** Indexes smaller than this are left alone, whatever their entries. */
export const REINDEX_MIN_BYTES = 8 * 1024 * 1024;
/** Rebuilt when larger than this many times 64 bytes per entry (plus 64 kB). */
export const REINDEX_FACTOR = 4;
/** No rebuild while a transaction in the database has held a snapshot this long (s). */
export const REINDEX_QUIET_S = 30;

export interface ReindexResult {
  /** why nothing was rebuilt, when nothing was */
  skipped?: 'old snapshot' | 'citus';
  rebuilt: { index: string; bytesBefore: number; bytesAfter: number; ms: number }[];
}

const IDENTIFIER = /^[a-z_][a-z0-9_]*$/;

/** One check: rebuilds what is bloated now (see the header). */
export async function reindexBloated(pool: pg.Pool, logger: Logger): Promise<ReindexResult> {
  // A Citus timeout database's indexes live on its worker nodes: not rebuilt from here.
  if ((await layoutOf(pool)).name === 'citus') return { skipped: 'citus', rebuilt: [] };
  const { rows: old } = await pool.query<{ seconds: number }>(sql('retention/oldest_snapshot'));
  if (old[0]!.seconds > REINDEX_QUIET_S) return { skipped: 'old snapshot', rebuilt: [] };
  const { rows: bloated } = await pool.query<{ name: string; bytes: number; entries: number }>(
    sql('retention/bloated_indexes', { minBytes: REINDEX_MIN_BYTES, factor: REINDEX_FACTOR }),
  );
  const result: ReindexResult = { rebuilt: [] };
  if (bloated.length === 0) return result;
  const client = await pool.connect();
  try {
    await client.query("SET lock_timeout = '1s'");
    const { rows: leftovers } = await client.query<{ name: string }>(sql('retention/reindex_leftovers'));
    for (const l of leftovers) {
      if (!IDENTIFIER.test(l.name)) continue;
      await client.query(`DROP INDEX CONCURRENTLY IF EXISTS timeout_center.${l.name}`);
      logger.info({ index: l.name }, 'reindexer dropped an index a failed rebuild left invalid');
    }
    for (const b of bloated) {
      if (!IDENTIFIER.test(b.name)) continue;
      const started = performance.now();
      await client.query(`REINDEX INDEX CONCURRENTLY timeout_center.${b.name}`);
      const { rows } = await client.query<{ bytes: number }>('SELECT pg_relation_size($1::regclass)::float8 AS bytes', [`timeout_center.${b.name}`]);
      result.rebuilt.push({ index: b.name, bytesBefore: b.bytes, bytesAfter: rows[0]!.bytes, ms: Math.round(performance.now() - started) });
    }
  } finally {
    // The session's lock_timeout goes with it: the client is not given back to the pool.
    client.release(true);
  }
  return result;
}

/** The periodic check: a duty of the leading coordinator (started on election, stopped on
 *  deposition), as retention is; the timer is the services' own periodic(). */
export class Reindexer extends BaseService {
  readonly name = 'reindexer';
  private readonly timer: Service;

  constructor(private readonly deps: { pool: pg.Pool; logger: Logger; intervalMs?: number }) {
    super();
    this.timer = periodic(
      'reindexer',
      deps.intervalMs ?? REINDEX_CHECK_MS,
      () => this.runOnce().then(() => undefined),
      () => {},
    );
  }

  protected onStart(): Promise<void> {
    return this.timer.start();
  }

  protected onStop(): Promise<void> {
    return this.timer.stop();
  }

  /** One check. Errors are logged; the next check tries again. */
  async runOnce(): Promise<ReindexResult | undefined> {
    const { pool, logger } = this.deps;
    try {
      const result = await reindexBloated(pool, logger);
      for (const r of result.rebuilt) logger.info(r, 'reindexer rebuilt a bloated index of timeout_center.timeouts');
      return result;
    } catch (err) {
      logger.warn({ err }, 'reindexer: a rebuild failed; the next check retries (an index it left invalid is dropped first)');
      return undefined;
    }
  }
}
