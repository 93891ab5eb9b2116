// The operator verbs over several databases (docs/scale.md "Acting across stores"). Without a
// config, or with a config whose kinds all live in the center, a verb reads and acts on the
// center's database exactly as before. With a config that names stores (kinds with
// `store: beside`), it reads every store and the center (or the one --store names), names the
// store of each row, and reports a store that does not answer as unreachable instead of failing.
import { Option, type Command } from 'commander';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { loadConfig, type LoadedConfig } from '../../config.js';
import type { Database } from '../../db/schema.js';
import { createLogger } from '../../observability/logger.js';
import { forwardStoreAuditNow } from '../../stores/audit-outbox.js';
import { CENTER, StoreDirectory, type PerStore, type StoreDatabase } from '../../stores/store-directory.js';
export { mergeRows, storeStates, type StoreState } from '../../stores/store-directory.js';
import { inputError, print, withDatabase, type DbOptions } from './common.js';

/** --config: the file that names the stores. */
export const storesConfigOption = () =>
  new Option('--config <file>', 'config file naming the stores (businessDatabases, kinds with store: beside)').env('TIMEOUT_CENTER_CONFIG');

/** --store and --config: which databases a verb reads or acts on. */
export function withStoreOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--store <name>',
        'only this store (`center`, or a store of the config: a kind stored beside its orders); default with a config: the center and every store',
      ),
    )
    .addOption(storesConfigOption());
}

export interface Across {
  /** The config, when one was given. */
  config: LoadedConfig | undefined;
  directory: StoreDirectory;
  /** The databases this call covers, `center` first. */
  stores: string[];
  /** True when the call covers more than the center alone: rows and results name their store. */
  multi: boolean;
}

function configOf(opts: DbOptions): LoadedConfig | undefined {
  if (!opts.config) return undefined;
  try {
    return loadConfig({ path: opts.config, needsRedis: false });
  } catch (err) {
    throw inputError((err as Error).message);
  }
}

/**
 * Runs fn over the databases the options name. A call that covers the center alone keeps the
 * single-database behaviour (its errors exit as before: unreachable, schema missing); a call over
 * several gets one answer per store.
 */
export async function acrossStores<T>(opts: DbOptions, fn: (a: Across) => Promise<T>): Promise<T> {
  const config = configOf(opts);
  if (!config && opts.store !== undefined && opts.store !== CENTER) {
    throw inputError(`--store ${opts.store} needs the config that names the stores: pass --config <file> or set TIMEOUT_CENTER_CONFIG`);
  }
  const centerUrl = opts.databaseUrl ?? config?.databaseUrl;
  if (!centerUrl) throw inputError('DATABASE_URL is not set (e.g. DATABASE_URL=postgres://user@127.0.0.1:5432/app), or pass --database-url');
  const logger = createLogger('silent');
  const directory = config
    ? StoreDirectory.fromConfig(config, { centerUrl, logger, applicationName: 'timeout-center cli' })
    : new StoreDirectory({ centerUrl, logger, applicationName: 'timeout-center cli' });
  if (opts.store !== undefined && !directory.names.includes(opts.store)) {
    throw inputError(`--store ${opts.store}: not a store of ${opts.config}; its stores: ${directory.names.join(', ')}`);
  }
  const stores = opts.store !== undefined ? [opts.store] : directory.names;
  try {
    return await fn({ config, directory, stores, multi: directory.hasStores });
  } finally {
    await directory.close();
  }
}

/** fn on each database of the call: through withDatabase's checks (and exit codes) when there is
 *  only the center, with one answer per store when the config names stores. */
export async function eachStore<T>(a: Across, fn: (db: Kysely<Database>, pool: pg.Pool, d: StoreDatabase) => Promise<T>): Promise<PerStore<T>[]> {
  if (!a.multi) {
    const d = a.directory.database(a.stores[0]!);
    const value = await withDatabase({ databaseUrl: d.url }, (db, pool) => fn(db, pool, d));
    return [{ store: d.store, ok: true, value }];
  }
  return a.directory.each(a.stores, (d) => fn(d.db, d.pool, d));
}

/** One line per store that did not answer, for the end of a table. */
export function printUnreachable(answers: PerStore<unknown>[], what: string): void {
  for (const r of answers) {
    if (!r.ok) {
      print(
        `store ${r.store}: UNREACHABLE (${r.error}): its ${what} are not shown. Start it or check ${r.store === CENTER ? 'DATABASE_URL' : `businessDatabases.${r.store}`}; the other stores are shown.`,
      );
    }
  }
}

/** After an action in a store: its audit rows into the center's audit_log now (sql/0015). When the
 *  center does not answer they wait in the store, and its leader copies them later. */
export function forwardAudit(a: Across, store: string): Promise<boolean> {
  if (store === CENTER) return Promise.resolve(true);
  return forwardStoreAuditNow(a.directory.database(store).pool, a.directory.database(CENTER).pool, store);
}

/** A result as --json prints it: without whether its audit reached the center (said in the text). */
export function withoutAuditFlag<T extends { auditInCenter: boolean }>(r: T): Omit<T, 'auditInCenter'> {
  const { auditInCenter: _flag, ...rest } = r;
  return rest;
}
