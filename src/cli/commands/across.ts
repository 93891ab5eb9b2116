// The operator verbs over several databases (docs/scale.md "Acting across stores"). Without a
// config, or with a config whose kinds all live in the center, a verb reads and acts on the
// center's database exactly as before. With a config that names stores (kinds with
// `store: beside`), it reads every store and the center (or the one --store names), names the
// store of each row, and reports a store that does not answer as unreachable instead of failing.
import { Option, type Command } from 'commander';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { LoadedConfig } from '../../config.js';
import type { Database } from '../../db/schema.js';
import { createLogger } from '../../observability/logger.js';
import { forwardStoreAuditNow } from '../../stores/audit-outbox.js';
import { CENTER, StoreDirectory, unsetMessage, type PerStore, type StoreDatabase } from '../../stores/store-directory.js';
export { mergeRows, storeStates, type StoreState } from '../../stores/store-directory.js';
import { inputError, print, readConfig, unavailableError, withDatabase, type DbOptions } from './common.js';
import { partial } from '../exit-codes.js';

/** --store: which databases a verb reads or acts on (with --config, which every verb takes). */
export function withStoreOptions(cmd: Command): Command {
  return cmd.addOption(storeOption());
}

export const storeOption = () =>
  new Option(
    '--store <name>',
    'only this store (`center`, or a store of the config: a kind stored beside its orders); default with a config: the center and every store',
  );

export interface Across {
  /** The config, when one was given. */
  config: LoadedConfig | undefined;
  directory: StoreDirectory;
  /** The databases this call covers, `center` first. */
  stores: string[];
  /** True when the call covers more than the center alone: rows and results name their store. */
  multi: boolean;
}

/**
 * Runs fn over the databases the options name. A call that covers the center alone keeps the
 * single-database behaviour (its errors exit as before: unreachable, schema missing); a call over
 * several gets one answer per store.
 */
export async function acrossStores<T>(opts: DbOptions, fn: (a: Across) => Promise<T>): Promise<T> {
  const config = readConfig(opts);
  if (!config && opts.store !== undefined && opts.store !== CENTER) {
    throw inputError(`--store ${opts.store} needs the config that names the stores: pass --config <file> or set TIMEOUT_CENTER_CONFIG`);
  }
  const centerUrl = opts.databaseUrl ?? config?.databaseUrl;
  if (!centerUrl) {
    throw inputError(
      'DATABASE_URL is not set: set it (e.g. DATABASE_URL=postgres://user@127.0.0.1:5432/app), pass --database-url, or give a config with databaseUrl',
    );
  }
  const logger = createLogger('silent');
  const directory = config
    ? StoreDirectory.fromConfig(config, { centerUrl, logger, applicationName: 'timeout-center cli' })
    : new StoreDirectory({ centerUrl, logger, applicationName: 'timeout-center cli' });
  if (opts.store !== undefined && !directory.names.includes(opts.store)) {
    throw inputError(`--store ${opts.store}: not a store of ${opts.config}; its stores: ${directory.names.join(', ')}`);
  }
  const stores = opts.store !== undefined ? [opts.store] : directory.names;
  const unset = opts.store !== undefined ? directory.unsetVariable(opts.store) : undefined;
  if (unset) throw inputError(`--store ${opts.store}: ${unsetMessage(opts.store!, unset)}`);
  try {
    return await fn({ config, directory, stores, multi: directory.hasStores });
  } finally {
    await directory.close();
  }
}

/** fn on each database of the call: through withDatabase's checks (and exit codes) when there is
 *  only the center, with one answer per store when the config names stores (exit 1 when one of
 *  them did not answer, 3 when none did). */
export async function eachStore<T>(a: Across, fn: (db: Kysely<Database>, pool: pg.Pool, d: StoreDatabase) => Promise<T>): Promise<PerStore<T>[]> {
  if (!a.multi) {
    const d = a.directory.database(a.stores[0]!);
    const value = await withDatabase({ databaseUrl: d.url }, (db, pool) => fn(db, pool, d));
    return [{ store: d.store, ok: true, value }];
  }
  const answers = await a.directory.each(a.stores, (d) => fn(d.db, d.pool, d));
  // None answered: nothing done (exit 3, or 2 when it is only unset variables); some did not:
  // done in part (exit 1), each named in the output.
  assertSomeAnswered(answers);
  if (answers.some((r) => !r.ok)) partial();
  return answers;
}

/** One line per store that did not answer (or whose URL variable is unset), for the end of a
 *  table; the run is then done in part (exit 1). */
export function printUnreachable(answers: PerStore<unknown>[], what: string): void {
  for (const r of answers) {
    if (r.ok) continue;
    partial();
    if (r.unsetVariable) print(`store ${r.store}: NOT SET (${r.error}): its ${what} are not shown; the other stores are shown.`);
    else {
      print(
        `store ${r.store}: UNREACHABLE (${r.error}): its ${what} are not shown. Start it or check ${r.store === CENTER ? 'DATABASE_URL' : `businessDatabases.${r.store}`}; the other stores are shown.`,
      );
    }
  }
}

/** Every database of the call failed: nothing could be read or done (exit 3), unless a URL
 *  variable is unset (bad input, exit 2). */
export function assertSomeAnswered(answers: PerStore<unknown>[]): void {
  if (answers.length === 0 || answers.some((r) => r.ok)) return;
  const why = answers.map((r) => `${r.store}: ${r.ok ? '' : r.error}`).join('; ');
  if (answers.every((r) => !r.ok && r.unsetVariable)) throw inputError(why);
  throw unavailableError(`nothing done: no database of this call answered (${why}). Start it, then run the same command again`);
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
