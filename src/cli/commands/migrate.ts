// `timeout-center migrate`: the timeout_center schema in the center's database (then the config's
// kinds, routes and business databases), in every store, and the marker table in every business
// database. It ends with a summary for people, one row per database: which migrations it applied
// and the version it is at, or why it could not (unreachable, a URL variable unset, the wrong
// database). The JSON log lines of each step come with --logs, and by default when stdout is not
// a terminal (a deploy job's log); --json prints the summary as one document instead.
import { describeLayout } from '../../db/citus-layout.js';
import { ConfigError, loadConfig, type LoadedConfig } from '../../config.js';
import { syncKinds } from '../../db/kinds.js';
import { DEFAULT_LOCK_TIMEOUT_MS, migrate, type MigrateOptions } from '../../db/migrate.js';
import { applyRolesEverywhere } from '../../db/roles-step.js';
import { createPool } from '../../db/pool.js';
import { syncRoutes } from '../../db/routes.js';
import { syncTargets } from '../../db/targets.js';
import { createLogger } from '../../observability/logger.js';
import { checkPostgres } from '../../db/reachability.js';
import { migrateStores } from '../../stores/store-database.js';
import { storeLayout } from '../../stores/layout.js';
import { CENTER } from '../../stores/store-directory.js';
import { prepareBusinessDatabases, redactDbUrl } from '../../worker/business-db.js';
import { partial } from '../exit-codes.js';
import { jsonOption, print, printJson, table } from './common.js';
import { CommanderError, Option, type Command } from 'commander';

function lockTimeout(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < 10 || n > 60_000) throw new CommanderError(2, 'tc.input', `--lock-timeout must be 10..60000 (ms), got "${value}"`);
  return n;
}

interface MigrateCommandOptions {
  config?: string;
  schemaOnly?: boolean;
  force?: boolean;
  lockTimeout?: number;
  json?: boolean;
  /** true: --logs, false: --no-logs, undefined: on when stdout is not a terminal (and not --json). */
  logs?: boolean;
}

/** One database's outcome, as the summary shows it. */
export interface DatabaseMigrated {
  database: string;
  role: 'center' | 'store' | 'business database';
  url: string;
  ok: boolean;
  /** Migrations applied by this run (store and center). */
  applied: string[];
  /** The schema version it is at now (store and center); null when not reached. */
  version: number | null;
  /** The oldest timeout-center version that may run on it now (store and center). */
  oldestCode?: string;
  error?: string;
  unsetVariable?: string;
}

export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description(
      "create or upgrade the timeout_center schema in the center and in every store (safe from several processes at once), register the config's kinds, " +
        'prepare each business database; ends with a summary per database',
    )
    .option('--schema-only', 'apply migrations to DATABASE_URL only; do not read a config or register kinds')
    .addOption(
      new Option('--lock-timeout <ms>', 'longest one step waits for a lock before it backs off and tries again (the hot path never queues behind it longer)')
        .argParser((v) => lockTimeout(v))
        .default(DEFAULT_LOCK_TIMEOUT_MS),
    )
    .option(
      '--force',
      'apply a migration that live older processes cannot run beside (they stop on the new schema: upgrade them first; docs/upgrading.md "Breaking migrations")',
    )
    .addOption(jsonOption())
    .option('--logs', 'also print the JSON log line of each step (default: when stdout is not a terminal)')
    .option('--no-logs', 'never print the JSON log lines, only the summary')
    .action(async (opts: MigrateCommandOptions) => {
      const logsOn = opts.logs ?? (!process.stdout.isTTY && !opts.json);
      // Written synchronously, so that the summary comes after the last log line.
      const logger = createLogger(logsOn ? (process.env['LOG_LEVEL'] === 'debug' ? 'debug' : 'info') : 'silent', {}, { sync: true });
      let config: LoadedConfig | undefined;
      let url = process.env['DATABASE_URL'];
      if (!opts.schemaOnly) {
        // A store or business database whose URL variable is unset is named in the summary; the
        // others are migrated (exit 1).
        config = loadConfig({ path: opts.config, allowUnsetUrls: true, needsRedis: false });
        url = config.databaseUrl;
      }
      if (!url)
        throw new ConfigError('(environment)', ['DATABASE_URL is not set: set it to the center database URL (e.g. postgres://postgres@127.0.0.1:5432/app)']);
      const migrateOptions: MigrateOptions = { force: opts.force === true, lockTimeoutMs: opts.lockTimeout ?? DEFAULT_LOCK_TIMEOUT_MS };
      const pool = createPool({ connectionString: url, max: 2, applicationName: 'timeout-center migrate', logger });
      const rows: DatabaseMigrated[] = [];
      try {
        await checkPostgres(pool, url); // the center does not answer: nothing done, exit 3
        const result = await migrate(pool, logger, undefined, migrateOptions);
        if (config) {
          await syncKinds(pool, config.kinds);
          await syncRoutes(pool, config.kinds);
          await syncTargets(pool, config.businessDatabases);
        }
        logger.info(
          { applied: result.applied, version: result.current, layout: describeLayout(result.layout), kinds: config ? Object.keys(config.kinds) : undefined },
          result.applied.length ? 'database migrated' : 'database already up to date',
        );
        rows.push({
          database: CENTER,
          role: 'center',
          url: redactDbUrl(url),
          ok: true,
          applied: result.applied,
          version: result.current,
          oldestCode: result.oldestCode,
        });
      } finally {
        await pool.end();
      }
      if (config) rows.push(...(await storesAndBusinessDatabases(config, logger, migrateOptions)));
      await applyRolesEverywhere(url, config, logger); // the group roles and their grants (docs/roles.md)
      const failed = rows.filter((r) => !r.ok);
      if (failed.length > 0) partial();
      if (opts.json) {
        printJson({ ok: failed.length === 0, kinds: config ? Object.keys(config.kinds) : [], databases: rows });
        return;
      }
      print(describe(rows, config));
    });
}

async function storesAndBusinessDatabases(config: LoadedConfig, logger: ReturnType<typeof createLogger>, options: MigrateOptions): Promise<DatabaseMigrated[]> {
  const rows: DatabaseMigrated[] = [];
  // The schema in each store (kinds stored beside their orders), then the marker table in each
  // business database; one that cannot be reached is named, the others are done.
  const stores = await migrateStores(config, logger, options);
  const storeNames = new Set(storeLayout(config.kinds).keys());
  for (const store of storeNames) {
    const done = stores.migrated.find((m) => m.store === store);
    const failed = stores.failed.find((f) => f.store === store);
    if (done)
      rows.push({
        database: store,
        role: 'store',
        url: redactDbUrl(config.businessDatabaseUrls[store] ?? ''),
        ok: true,
        applied: done.applied,
        version: done.current,
      });
    else if (failed) {
      rows.push({
        database: store,
        role: 'store',
        url: failed.url,
        ok: false,
        applied: [],
        version: null,
        error: failed.error,
        ...(failed.unsetVariable ? { unsetVariable: failed.unsetVariable } : {}),
      });
    }
  }
  const others = Object.fromEntries(Object.entries(config.businessDatabaseUrls).filter(([name]) => !storeNames.has(name)));
  const business = await prepareBusinessDatabases(others, logger);
  for (const name of Object.keys(config.businessDatabases)) {
    if (storeNames.has(name)) continue;
    const unset = config.unsetUrls?.[name];
    const bad = business.unreachable.find((u) => u.name === name);
    if (unset) {
      rows.push({
        database: name,
        role: 'business database',
        url: '',
        ok: false,
        applied: [],
        version: null,
        error: `${unset} is not set (it should hold the URL of business database ${name})`,
        unsetVariable: unset,
      });
    } else if (bad) rows.push({ database: name, role: 'business database', url: bad.url, ok: false, applied: [], version: null, error: bad.error });
    else
      rows.push({ database: name, role: 'business database', url: redactDbUrl(config.businessDatabaseUrls[name] ?? ''), ok: true, applied: [], version: null });
  }
  return rows;
}

function migrations(applied: string[]): string {
  if (applied.length === 0) return 'none: already up to date';
  if (applied.length <= 3) return `applied ${applied.join(', ')}`;
  return `applied ${applied.length}: ${applied[0]} … ${applied.at(-1)}`;
}

/** The summary for people: one row per database, then what was not done and what to do. */
export function describe(rows: DatabaseMigrated[], config: LoadedConfig | undefined): string {
  const out: string[] = [];
  const failed = rows.filter((r) => !r.ok);
  out.push(
    failed.length === 0
      ? `migrate: done, ${rows.length} database${rows.length === 1 ? '' : 's'}`
      : `migrate: ${failed.length} of ${rows.length} databases NOT done`,
  );
  out.push(
    table(rows, [
      { header: 'database', value: (r) => r.database },
      { header: 'role', value: (r) => r.role },
      {
        header: 'migrations',
        value: (r) =>
          !r.ok
            ? r.unsetVariable
              ? `NOT SET: ${r.unsetVariable} is not set`
              : `NOT DONE: ${r.error}`
            : r.role === 'business database'
              ? 'marker table ready'
              : migrations(r.applied),
        max: 100,
      },
      { header: 'version', value: (r) => r.version },
      { header: 'runs code', value: (r) => (r.oldestCode ? `${r.oldestCode} and later` : '') },
      { header: 'url', value: (r) => r.url, max: 60 },
    ]),
  );
  if (config) {
    out.push(`Kinds registered: ${Object.keys(config.kinds).join(', ')}`);
  }
  for (const r of failed) {
    const what = r.role === 'store' ? `store ${r.database}` : r.role === 'business database' ? `business database ${r.database}` : r.database;
    out.push(
      r.unsetVariable
        ? `${what}: ${r.unsetVariable} is not set. Set it to the URL of ${r.database} (businessDatabases.${r.database}.urlEnv), then run migrate again.`
        : `${what}: ${r.error}. Start it or fix businessDatabases.${r.database}, then run migrate again.`,
    );
  }
  if (failed.length > 0) out.push('What was done stays done: running migrate again does only what is missing.');
  return out.join('\n');
}
