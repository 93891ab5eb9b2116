// Applies sql/NNNN_*.sql in order, each once, under a session advisory lock so that several
// processes starting together do not race (bullmq's migrator, graphile-worker's numbered files),
// online (docs/upgrading.md "How migrate changes a live database"):
//   - every step waits for its locks at most lockTimeoutMs, then backs off and tries again, so it
//     never queues in front of the hot path for longer than that (a statement waiting for ACCESS
//     EXCLUSIVE blocks every INSERT that comes after it);
//   - a `-- tc:no-transaction` file (CREATE INDEX CONCURRENTLY) runs statement by statement, and an
//     index a crash left INVALID is dropped and built again on the next run;
//   - a step that raises the schema's oldest code (`-- tc:oldest-code`) is refused while a live
//     process older than that runs (src/release/fleet.ts), unless forced;
//   - the schema contract (src/release/schema-contract.ts) is written with each migration.
import type pg from 'pg';
import type { Logger } from 'pino';
import semver from 'semver';
import { applyLayout, describeLayout, type Layout } from './citus-layout.js';
import {
  concurrentIndex,
  listMigrations,
  MIGRATIONS_DIR,
  oldestCodeFor,
  PRE_RELEASE_CODE,
  splitStatements,
  waitsHarmlessly,
  type Migration,
} from './migrations.js';
import { describeProcess, liveProcesses, type LiveProcess } from '../release/fleet.js';
import { checkSchemaContract } from '../release/schema-contract.js';
import { VERSION } from '../version.js';

export { listMigrations, MIGRATIONS_DIR, type Migration };

// Any constant works; this one spells "tmoutctr" in ASCII.
export const MIGRATION_LOCK_KEY = 8390046510045816946n;

export interface MigrateResult {
  applied: string[];
  current: number;
  /** The oldest code version that may run on the schema now. */
  oldestCode: string;
  /** The database's layout after the migrations: plain, or citus when it has the extension. */
  layout: Layout;
  /** The layout was applied by this call (the first migrate of a database with citus). */
  layoutApplied: boolean;
}

export interface MigrateOptions {
  /** Buckets (Citus shards of timeouts) when this migrate applies the Citus layout. */
  citusBuckets?: number;
  /** How long one step may wait for a lock before it backs off (default 100 ms). */
  lockTimeoutMs?: number;
  /** Tries per step before migrate gives up (default 50, about two minutes with the backoff). */
  lockAttempts?: number;
  /** Apply a step that live older processes cannot run beside (`migrate --force`). */
  force?: boolean;
}

export const DEFAULT_LOCK_TIMEOUT_MS = 100;
export const DEFAULT_LOCK_ATTEMPTS = 50;

/** A step refused because live processes could not run on the schema it leaves. */
export class OlderProcessesError extends Error {
  constructor(
    readonly migration: string,
    readonly oldestCode: string,
    readonly processes: LiveProcess[],
  ) {
    super(
      `migration ${migration} needs timeout-center ${oldestCode} or newer on every process, and these live processes are older:\n` +
        processes.map((p) => `  - ${describeProcess(p)}`).join('\n') +
        `\nUpgrade or stop them first (they would stop closing orders on the new schema), then run migrate again; ` +
        '`timeout-center migrate --force` applies it anyway (docs/upgrading.md "Breaking migrations")',
    );
    this.name = 'OlderProcessesError';
  }
}

const isLockTimeout = (err: unknown): boolean => {
  const code = (err as { code?: string } | null)?.code;
  return code === '55P03' || code === '40P01'; // lock_not_available, deadlock_detected
};

export async function migrate(pool: pg.Pool, logger: Logger, dir = MIGRATIONS_DIR, options: MigrateOptions = {}): Promise<MigrateResult> {
  const migrations = listMigrations(dir);
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  const attempts = options.lockAttempts ?? DEFAULT_LOCK_ATTEMPTS;
  // Loaded here: the CLI's other verbs (and --help) start without the engine's packages.
  const { ConstantBackoff, ExponentialBackoff, handleWhen, retry } = await import('cockatiel');
  const client = await pool.connect();
  const applied: string[] = [];
  // Backoff with jitter between tries of a step that met a lock: 50 ms doubling to 5 s.
  const policy = retry(handleWhen(isLockTimeout), {
    maxAttempts: attempts - 1,
    backoff: lockTimeoutMs === 0 ? new ConstantBackoff(0) : new ExponentialBackoff({ initialDelay: 50, maxDelay: 5000 }),
  });
  let attempt = 0;
  policy.onRetry((r) => {
    attempt++;
    logger.info(
      { attempt, delayMs: Math.round(r.delay), err: 'error' in r ? (r.error as Error).message : undefined },
      'migration step met a lock; backing off',
    );
  });
  try {
    // Polled, not waited for in one statement: a session waiting in pg_advisory_lock() holds a
    // snapshot, and CREATE INDEX CONCURRENTLY in the session holding the lock (a
    // `-- tc:no-transaction` migration) waits for every older snapshot to go: the two would wait
    // on each other (five processes migrating at once hung).
    for (;;) {
      const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [MIGRATION_LOCK_KEY.toString()]);
      if (rows[0]?.locked) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    try {
      await bootstrap(client);
      const { rows } = await client.query<{ version: number }>('SELECT version FROM timeout_center.migrations');
      const done = new Set(rows.map((r) => r.version));
      const known = new Set(migrations.map((m) => m.version));
      const unknown = [...done].filter((v) => !known.has(v));
      if (unknown.length > 0) {
        throw new Error(
          `the database has migration(s) ${unknown.join(', ')} that this build (timeout-center ${VERSION}) does not know: it was migrated by a newer timeout-center. ` +
            'Run migrate with that version (or newer); this one changes nothing',
        );
      }
      const pending = migrations.filter((m) => !done.has(m.version));
      await refuseIfOlderProcesses(client, migrations, pending, options.force === true, logger);
      for (const m of pending) {
        const floor = oldestCodeFor(migrations.filter((x) => x.version <= m.version));
        attempt = 0;
        if (m.transactional) await policy.execute(() => applyInTransaction(client, m, floor, lockTimeoutMs)).catch((err: unknown) => gaveUp(m, err, attempts));
        else await applyStatementByStatement(client, m, floor, lockTimeoutMs, (step) => policy.execute(step)).catch((err: unknown) => gaveUp(m, err, attempts));
        applied.push(m.name);
        logger.info({ migration: m.name, oldestCode: floor }, 'applied migration');
      }
      // A schema migrated before 1.0.0 gets its contract row on the first migrate that finds nothing to do.
      await writeContract(client, migrations.at(-1)?.version ?? 0, oldestCodeFor(migrations));
      // The layout (src/db/citus-layout.ts): a database with the citus extension is laid out over
      // the cluster once; a plain one is left as it is.
      const layout = await applyLayout(client, options.citusBuckets);
      if (layout.applied) logger.info({ layout: describeLayout(layout.layout) }, 'applied layout');
      return { applied, current: migrations.at(-1)?.version ?? 0, oldestCode: oldestCodeFor(migrations), layout: layout.layout, layoutApplied: layout.applied };
    } finally {
      await client.query('RESET lock_timeout').catch(() => {});
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY.toString()]).catch(() => {});
    }
  } finally {
    client.release();
  }
}

/** The schema, the list of migrations and the contract, created on the first migrate. */
async function bootstrap(client: pg.PoolClient): Promise<void> {
  await client.query(`CREATE SCHEMA IF NOT EXISTS timeout_center;
    CREATE TABLE IF NOT EXISTS timeout_center.migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
    CREATE TABLE IF NOT EXISTS timeout_center.schema_contract (
      one boolean PRIMARY KEY DEFAULT true CHECK (one),
      schema_version integer NOT NULL,
      oldest_code text NOT NULL,
      migrated_by text NOT NULL,
      migrated_at timestamptz NOT NULL DEFAULT now());
    COMMENT ON TABLE timeout_center.schema_contract IS
      'the schema version and the oldest timeout-center version that may run on it; every process checks it at start (docs/upgrading.md)'`);
}

async function writeContract(client: pg.ClientBase, schemaVersion: number, oldestCode: string): Promise<void> {
  await client.query(
    `INSERT INTO timeout_center.schema_contract (schema_version, oldest_code, migrated_by) VALUES ($1, $2, $3)
     ON CONFLICT (one) DO UPDATE SET schema_version = EXCLUDED.schema_version, oldest_code = EXCLUDED.oldest_code,
       migrated_by = EXCLUDED.migrated_by, migrated_at = now()
     WHERE (schema_contract.schema_version, schema_contract.oldest_code, schema_contract.migrated_by)
       IS DISTINCT FROM (EXCLUDED.schema_version, EXCLUDED.oldest_code, EXCLUDED.migrated_by)`,
    [schemaVersion, oldestCode, VERSION],
  );
}

async function record(client: pg.ClientBase, m: Migration, floor: string): Promise<void> {
  await client.query('INSERT INTO timeout_center.migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
  await writeContract(client, m.version, floor);
}

async function applyInTransaction(client: pg.PoolClient, m: Migration, floor: string, lockTimeoutMs: number): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query(`SET LOCAL lock_timeout = ${Math.floor(lockTimeoutMs)}`);
    await client.query(m.sql);
    await record(client, m, floor);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    if (isLockTimeout(err)) throw err; // the retry policy backs off and runs the step again
    throw new Error(`migration ${m.name} failed and was rolled back: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * A `-- tc:no-transaction` file: each statement on its own (idempotent, so a run cut off anywhere
 * does the rest next time), recorded after the last one. CREATE INDEX CONCURRENTLY waits without
 * a lock_timeout: it holds SHARE UPDATE EXCLUSIVE, which no INSERT, UPDATE or DELETE waits for.
 */
async function applyStatementByStatement(
  client: pg.PoolClient,
  m: Migration,
  floor: string,
  lockTimeoutMs: number,
  withRetry: (step: () => Promise<void>) => Promise<void>,
): Promise<void> {
  try {
    for (const statement of splitStatements(m.sql)) {
      await withRetry(async () => {
        await client.query(`SET lock_timeout = ${waitsHarmlessly(statement) ? 0 : Math.floor(lockTimeoutMs)}`);
        const index = concurrentIndex(statement);
        if (index) await dropIfInvalid(client, index);
        await client.query(statement);
      });
    }
    await withRetry(async () => {
      await client.query(`SET lock_timeout = ${Math.floor(lockTimeoutMs)}`);
      await client.query('BEGIN');
      try {
        await record(client, m, floor);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
    });
  } catch (err) {
    if (isLockTimeout(err)) throw err;
    throw new Error(`migration ${m.name} stopped: ${(err as Error).message}. What it did stays; run migrate again to finish it`, { cause: err });
  }
}

/** A step that met a lock on every try: say what holds it up and that nothing is half done. */
function gaveUp(m: Migration, err: unknown, attempts: number): never {
  if (!isLockTimeout(err)) throw err;
  throw new Error(
    `migration ${m.name} could not take its locks in ${attempts} tries (${(err as Error).message}): long transactions hold the tables it changes. ` +
      'Find them with SELECT pid, xact_start, application_name, query FROM pg_stat_activity ORDER BY xact_start, then run migrate again: ' +
      'what was done stays done, the rest was not started',
    { cause: err },
  );
}

/** An index that a crashed CREATE INDEX CONCURRENTLY left behind is INVALID: IF NOT EXISTS would
 *  keep it as it is, so it is dropped and the statement builds it again. */
async function dropIfInvalid(client: pg.PoolClient, index: { schema: string; name: string }): Promise<void> {
  const { rows } = await client.query<{ valid: boolean }>(
    `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2`,
    [index.schema, index.name],
  );
  if (rows[0] && !rows[0].valid) {
    await client.query('SET lock_timeout = 0');
    await client.query(`DROP INDEX CONCURRENTLY IF EXISTS "${index.schema}"."${index.name}"`);
  }
}

async function refuseIfOlderProcesses(client: pg.PoolClient, all: Migration[], pending: Migration[], force: boolean, logger: Logger): Promise<void> {
  if (pending.length === 0) return;
  const applied = all.filter((m) => !pending.includes(m));
  const before = oldestCodeFor(applied);
  for (const m of pending) {
    const floor = oldestCodeFor([...applied, ...pending.filter((p) => p.version <= m.version)]);
    if (!semver.gt(floor, before)) continue;
    const older = (await liveProcesses(client)).filter((p) => semver.lt(p.version ?? PRE_RELEASE_CODE, floor));
    if (older.length === 0) continue;
    const error = new OlderProcessesError(m.name, floor, older);
    if (!force) throw error;
    logger.warn(
      { migration: m.name, oldestCode: floor, processes: older.map(describeProcess) },
      'migrate --force: applying a migration that live older processes cannot run beside',
    );
    return;
  }
}

/** At start, before a process uses a database: throws SchemaContractError (missing schema, older
 *  than this build needs, or newer and no longer running this version) with what to do. */
export async function assertMigrated(pool: pg.Pool, database?: string): Promise<void> {
  await checkSchemaContract(pool, database === undefined ? {} : { database });
}
