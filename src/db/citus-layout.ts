// The database's layout: `plain` (one PostgreSQL, or a PostgreSQL whose database has no citus
// extension) or `citus` (timeouts and done_timeouts distributed on a bucket over a Citus cluster;
// docs/scale.md "Citus: what runs"). `migrate` applies the Citus layout (sql/citus/layout.sql)
// after the numbered migrations when the database has the citus extension and the layout is not
// there yet; every process reads the layout once at start and picks the statements for it
// (src/db/layout-statements.ts). On plain PostgreSQL nothing of it exists.
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { fileURLToPath } from 'node:url';

/** sql/citus/ sits two levels above both src/db and dist/db (as migrate.ts's sql/). */
const LAYOUT_SQL = fileURLToPath(new URL('../../sql/citus/layout.sql', import.meta.url));
/** What the layout adds beside its tables, (re)applied at every migrate of a Citus database, in
 *  order: the buckets table (sql/citus/buckets.sql), the claim of a shard whose handler's tables
 *  are colocated with timeouts, a Citus distributed function (sql/citus/claim_in_bucket.sql), the
 *  routing rules' Citus form (sql/citus/routes.sql: the stamp trigger compiled for the distributed
 *  timeouts), and settle on read refused with a clear error (sql/citus/settle.sql: not built on
 *  Citus yet). */
const OBJECTS_SQL = ['buckets.sql', 'claim_in_bucket.sql', 'routes.sql', 'settle.sql'].map((f) =>
  fileURLToPath(new URL(`../../sql/citus/${f}`, import.meta.url)),
);

/** Buckets (= Citus shards of timeouts) unless migrate is told otherwise: B workers' slots can
 *  claim one kind side by side, and a cluster can grow to B worker nodes (docs/scale.md). */
export const DEFAULT_CITUS_BUCKETS = 16;

export type Layout = { readonly name: 'plain' } | { readonly name: 'citus'; readonly buckets: readonly number[] };

export const PLAIN: Layout = { name: 'plain' };

/** Anything that runs a query: a pg pool, client, or the operations layer's Queryable. */
export interface LayoutReader {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

/** The layout of the database behind the pool (one round trip). */
export async function readLayout(db: LayoutReader): Promise<Layout> {
  const { rows } = await db.query<{ t: string | null }>("SELECT to_regclass('timeout_center.layout')::text AS t");
  if (!rows[0]?.t) return PLAIN;
  const { rows: l } = await db.query<{ buckets: number[] }>("SELECT buckets FROM timeout_center.layout WHERE name = 'citus'");
  const buckets = l[0]?.buckets;
  return buckets ? { name: 'citus', buckets } : PLAIN;
}

export interface CitusNodes {
  /** Worker nodes registered and active (pg_dist_node, not the coordinator's group 0). */
  readonly workers: number;
  /** Shard placements of timeouts per worker node, host:port -> count. */
  readonly placements: Record<string, number>;
}

/** How many Citus worker nodes serve the layout, and where timeouts' shards are. */
export async function citusNodes(db: pg.Pool | pg.PoolClient | pg.Client): Promise<CitusNodes> {
  const { rows } = await db.query<{ node: string; shards: number }>(
    `SELECT n.nodename || ':' || n.nodeport AS node, count(p.shardid)::int AS shards
       FROM pg_dist_node n
       LEFT JOIN pg_dist_placement p ON p.groupid = n.groupid
        AND p.shardid IN (SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'timeout_center.timeouts'::regclass)
      WHERE n.groupid <> 0 AND n.isactive AND n.noderole = 'primary'
      GROUP BY 1 ORDER BY 1`,
  );
  return { workers: rows.length, placements: Object.fromEntries(rows.map((r) => [r.node, r.shards])) };
}

/** A one-line description for migrate's log and status. */
export function describeLayout(layout: Layout, nodes?: CitusNodes): string {
  if (layout.name === 'plain') return 'plain (one PostgreSQL)';
  return `citus (${layout.buckets.length} buckets over ${nodes ? `${nodes.workers} worker node(s)` : 'the Citus cluster'})`;
}

export interface LayoutResult {
  readonly layout: Layout;
  /** true when this call applied the Citus layout. */
  readonly applied: boolean;
}

/**
 * Applies the Citus layout when the database has the citus extension and not yet the layout, in
 * one transaction (rows already there are kept, each placed in its bucket). Without citus, or
 * already applied: nothing changes. migrate() calls it on its own connection, under its advisory
 * lock (a second migrate waits, then finds the layout there).
 */
export async function applyLayout(client: pg.PoolClient | pg.Client, buckets = DEFAULT_CITUS_BUCKETS): Promise<LayoutResult> {
  const { rows } = await client.query<{ citus: boolean }>("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS citus");
  const current = await readLayout(client);
  if (!rows[0]?.citus) return { layout: current, applied: false };
  if (current.name === 'citus') {
    await applyObjects(client);
    return { layout: current, applied: false };
  }
  if (!Number.isInteger(buckets) || buckets < 1 || buckets > 1024) throw new Error(`citus buckets must be 1-1024, got ${buckets}`);
  const text = readFileSync(LAYOUT_SQL, 'utf8').replaceAll(':buckets', String(buckets));
  await client.query('BEGIN');
  try {
    await client.query(text);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw new Error(`the Citus layout failed and was rolled back: ${(err as Error).message}`, { cause: err });
  }
  await applyObjects(client);
  return { layout: await readLayout(client), applied: true };
}

/** The layout's other objects, current at every migrate (each file is idempotent: CREATE ... IF
 *  NOT EXISTS, CREATE OR REPLACE, and Citus's create_distributed_function, which keeps a function
 *  already distributed as it is). A transaction of their own, after the layout's: Citus colocates
 *  them with a table that is distributed already. */
async function applyObjects(client: pg.PoolClient | pg.Client): Promise<void> {
  await client.query('BEGIN');
  try {
    for (const file of OBJECTS_SQL) await client.query(readFileSync(file, 'utf8'));
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw new Error(`the Citus layout's objects failed and were rolled back: ${(err as Error).message}`, { cause: err });
  }
}

const known = new WeakMap<object, Promise<Layout>>();

/**
 * The layout of a pool's database, read once per pool (a process's statements pick their Citus
 * form from it: the layout is fixed once migrate applied it). A failed read is not remembered.
 */
export function layoutOf(pool: LayoutReader): Promise<Layout> {
  let found = known.get(pool);
  if (!found) {
    found = readLayout(pool);
    known.set(pool, found);
    found.catch(() => known.delete(pool));
  }
  return found;
}

/** The bucket a shard claims from: set by the Citus map (shards.bucket), null on plain PostgreSQL. */
export function shardBucket(bucket: number | null | undefined, shardId: number): number {
  if (bucket === null || bucket === undefined) throw new Error(`shard ${shardId} has no bucket: it was planned before the Citus layout was applied`);
  return bucket;
}
