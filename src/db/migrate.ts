// Applies sql/NNNN_*.sql in order, each once, under a session advisory lock so that several
// processes starting together do not race (bullmq's migrator, graphile-worker's numbered files).
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Logger } from 'pino';
import { applyLayout, describeLayout, type Layout } from './citus-layout.js';

/** sql/ sits two levels above both src/db and dist/db. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('../../sql/', import.meta.url));

// Any constant works; this one spells "tmoutctr" in ASCII.
export const MIGRATION_LOCK_KEY = 8390046510045816946n;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file.replace(/\.sql$/, ''),
      sql: readFileSync(`${dir}/${file}`, 'utf8'),
    }));
}

export interface MigrateResult {
  applied: string[];
  current: number;
  /** The database's layout after the migrations: plain, or citus when it has the extension. */
  layout: Layout;
  /** The layout was applied by this call (the first migrate of a database with citus). */
  layoutApplied: boolean;
}

export interface MigrateOptions {
  /** Buckets (Citus shards of timeouts) when this migrate applies the Citus layout. */
  citusBuckets?: number;
}

export async function migrate(pool: pg.Pool, logger: Logger, dir = MIGRATIONS_DIR, options: MigrateOptions = {}): Promise<MigrateResult> {
  const migrations = listMigrations(dir);
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    // Polled, not waited for in one statement: a session waiting in pg_advisory_lock() holds a
    // snapshot, and CREATE INDEX CONCURRENTLY in the session holding the lock (a
    // tc:no-transaction migration) waits for every older snapshot to go: the two would wait on
    // each other.
    for (;;) {
      const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [MIGRATION_LOCK_KEY.toString()]);
      if (rows[0]!.locked) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    try {
      await client.query(`CREATE SCHEMA IF NOT EXISTS timeout_center;
        CREATE TABLE IF NOT EXISTS timeout_center.migrations (
          version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const { rows } = await client.query<{ version: number }>('SELECT version FROM timeout_center.migrations');
      const done = new Set(rows.map((r) => r.version));
      const known = new Set(migrations.map((m) => m.version));
      const unknown = [...done].filter((v) => !known.has(v));
      if (unknown.length > 0) {
        throw new Error(
          `the database has migration(s) ${unknown.join(', ')} that this build does not know: it was migrated by a newer timeout-center; upgrade this process instead of running an older one`,
        );
      }
      for (const m of migrations) {
        if (done.has(m.version)) continue;
        if (NO_TRANSACTION.test(m.sql)) {
          await applyOutsideTransaction(client, m);
          applied.push(m.name);
          logger.info({ migration: m.name }, 'applied migration');
          continue;
        }
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          await client.query('INSERT INTO timeout_center.migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw new Error(`migration ${m.name} failed and was rolled back: ${(err as Error).message}`, { cause: err });
        }
        applied.push(m.name);
        logger.info({ migration: m.name }, 'applied migration');
      }
      // The layout (src/db/citus-layout.ts): a database with the citus extension is laid out over
      // the cluster once; a plain one is left as it is.
      const layout = await applyLayout(client, options.citusBuckets);
      if (layout.applied) logger.info({ layout: describeLayout(layout.layout) }, 'applied layout');
      return { applied, current: migrations.at(-1)?.version ?? 0, layout: layout.layout, layoutApplied: layout.applied };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY.toString()]).catch(() => {});
    }
  } finally {
    client.release();
  }
}

/** `-- tc:no-transaction` in a migration's leading comments (docs: /work/notes/migrations.md): its
 *  statements run one by one outside a transaction (CREATE INDEX CONCURRENTLY cannot run in one),
 *  each idempotent, and the migration is recorded after the last. */
const NO_TRANSACTION = /^(?:--[^\n]*\n|\s*\n)*?--\s*tc:no-transaction\b/;
const CONCURRENT_INDEX = /CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(\w+)/i;

async function applyOutsideTransaction(client: pg.PoolClient, m: Migration): Promise<void> {
  const statements = m.sql
    .split(/;[ \t]*(?:\n|$)/)
    .map((s) => s.replace(/^(?:\s*--[^\n]*\n)+/, '').trim())
    .filter((s) => s.length > 0);
  for (const statement of statements) {
    try {
      // An index left INVALID by a build that died half way is dropped and built again (IF NOT
      // EXISTS would keep it, unused and still written).
      const index = CONCURRENT_INDEX.exec(statement)?.[1];
      if (index) {
        const { rows } = await client.query<{ invalid: boolean }>(
          `SELECT NOT i.indisvalid AS invalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'timeout_center' AND c.relname = $1`,
          [index],
        );
        if (rows[0]?.invalid) await client.query(`DROP INDEX CONCURRENTLY IF EXISTS timeout_center.${index}`);
      }
      await client.query(statement);
    } catch (err) {
      throw new Error(
        `migration ${m.name} failed at "${statement.slice(0, 80)}...": ${(err as Error).message}; its statements are idempotent: run migrate again`,
        { cause: err },
      );
    }
  }
  await client.query('INSERT INTO timeout_center.migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
}

/** Throws a clear error when the schema is missing or behind this build. */
export async function assertMigrated(pool: pg.Pool, dir = MIGRATIONS_DIR): Promise<void> {
  const latest = listMigrations(dir).at(-1)?.version ?? 0;
  // Two statements: a query naming a missing table fails at parse time, whatever its CASE says.
  const { rows: exists } = await pool.query<{ t: string | null }>("SELECT to_regclass('timeout_center.migrations')::text AS t");
  let current: number | null = null;
  if (exists[0]?.t) {
    const { rows } = await pool.query<{ v: number }>('SELECT coalesce(max(version), 0) AS v FROM timeout_center.migrations');
    current = rows[0]?.v ?? 0;
  }
  if (current === null || current < latest) {
    throw new Error(
      `the database schema is ${current === null ? 'missing' : `at migration ${current}`}, this build needs ${latest}: run \`timeout-center migrate\` first`,
    );
  }
}
