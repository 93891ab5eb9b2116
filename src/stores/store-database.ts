// A store's database (docs/scale.md): the business database a kind stored beside its orders keeps
// its timeouts in. `migrate` installs the timeout_center schema there and names the database as the
// store; a coordinator leading the store checks that name and writes the config's kinds and rules
// there before its first tick, so a URL that points at another database fails loudly instead of
// scanning the wrong rows.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config, LoadedConfig } from '../config.js';
import { syncKinds } from '../db/kinds.js';
import { assertMigrated, migrate, type MigrateOptions } from '../db/migrate.js';
import { createPool } from '../db/pool.js';
import { sql } from '../db/queries.js';
import { syncRoutes } from '../db/routes.js';
import { redactDbUrl } from '../worker/business-db.js';
import { storeLayout } from './layout.js';

export class StoreIdentityError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StoreIdentityError';
  }
}

/** Installs or upgrades the schema in a store's database and names it as the store. */
export async function migrateStore(
  pool: pg.Pool,
  store: string,
  kinds: Config['kinds'],
  logger: Logger,
  options: MigrateOptions = {},
): Promise<{ applied: string[]; current: number }> {
  // A database that served the external path holds timeout_center.markers without the schema's
  // migrations: an empty marker table gives way to the schema's own; one with rows is a run in
  // flight, which must record first.
  const { rows } = await pool.query<{ markers: string | null; migrations: string | null }>(
    "SELECT to_regclass('timeout_center.markers')::text AS markers, to_regclass('timeout_center.migrations')::text AS migrations",
  );
  if (rows[0]?.markers && !rows[0].migrations) {
    const { rowCount } = await pool.query('SELECT 1 FROM timeout_center.markers LIMIT 1');
    if (rowCount) {
      throw new StoreIdentityError(
        `store ${store}: timeout_center.markers holds external runs in flight; let the workers record them (the table empties), then run migrate again`,
      );
    }
    await pool.query('DROP TABLE timeout_center.markers');
  }
  const result = await migrate(pool, logger, undefined, options);
  const { rows: named } = await pool.query<{ store: string }>(sql('db/set_store_identity', { store }));
  if (named[0]?.store !== store) {
    throw new StoreIdentityError(`the database given for store ${store} is already store ${named[0]?.store ?? '?'}: check businessDatabases.${store}'s URL`);
  }
  await syncKinds(pool, kinds);
  await syncRoutes(pool, kinds);
  return { applied: result.applied, current: result.current };
}

/** Before a store is led: the schema is current, the database is this store, and it holds the
 *  config's kinds and store rules (the insert check reads them there). */
export async function prepareStore(pool: pg.Pool, store: string, kinds: Config['kinds']): Promise<void> {
  await assertMigrated(pool).catch((err: Error) => {
    throw new StoreIdentityError(`store ${store}: ${err.message}`);
  });
  const { rows } = await pool.query<{ store: string }>(sql('db/store_identity'));
  if (rows[0]?.store !== store) {
    throw new StoreIdentityError(
      rows[0]
        ? `the database given for store ${store} is store ${rows[0].store}: check businessDatabases.${store}'s URL`
        : `the database given for store ${store} is not named as a store: run \`timeout-center migrate\``,
    );
  }
  await syncKinds(pool, kinds);
  await syncRoutes(pool, kinds);
}

export interface StoresMigrated {
  migrated: { store: string; applied: string[]; current: number }[];
  /** Stores that could not be reached, refused (wrong database), or whose URL variable is not set
   *  (`unsetVariable`, with a config loaded with allowUnsetUrls): named, with why. */
  failed: { store: string; url: string; error: string; unsetVariable?: string }[];
}

/** `migrate` for every store of the config: each one tried, those that fail named. */
export async function migrateStores(config: LoadedConfig, logger: Logger, options: MigrateOptions = {}): Promise<StoresMigrated> {
  const out: StoresMigrated = { migrated: [], failed: [] };
  for (const store of storeLayout(config.kinds).keys()) {
    const unset = config.unsetUrls?.[store];
    if (unset) {
      out.failed.push({ store, url: '', error: `${unset} is not set (it should hold the URL of store ${store})`, unsetVariable: unset });
      continue;
    }
    const url = config.businessDatabaseUrls[store] ?? '';
    const pool = createPool({ connectionString: url, max: 1, applicationName: 'timeout-center migrate', logger, connectionTimeoutMs: 5000 });
    try {
      const { applied, current } = await migrateStore(pool, store, config.kinds, logger.child({ store }), options);
      out.migrated.push({ store, applied, current });
      logger.info({ store, applied }, applied.length ? `store ${store} migrated` : `store ${store} already up to date`);
    } catch (err) {
      out.failed.push({ store, url: redactDbUrl(url), error: (err as Error).message });
    } finally {
      await pool.end().catch(() => {});
    }
  }
  return out;
}
