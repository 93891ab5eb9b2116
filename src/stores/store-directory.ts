// The databases an operator verb or the console reads and acts on (docs/scale.md "Acting across
// stores"): the center's, named `center`, and each store of the config. Pools open on first use,
// small and with short connection and statement timeouts, so a store that is down answers "
// unreachable, with why" within seconds instead of holding up the others.
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type pg from 'pg';
import type { LoadedConfig } from '../config.js';
import { assertMigrated } from '../db/migrate.js';
import { createKysely } from '../db/kysely.js';
import { createPool } from '../db/pool.js';
import type { Database } from '../db/schema.js';
import { redactDbUrl } from '../worker/business-db.js';
import { storeLayout } from './layout.js';

/** How operators name the center's own database among the stores. */
export const CENTER = 'center';

export interface StoreDatabase {
  /** `center`, or the store's name. */
  store: string;
  url: string;
  /** The kinds whose timeouts live here (every center kind for `center`: undefined). */
  kinds: string[] | undefined;
  pool: pg.Pool;
  db: Kysely<Database>;
}

/** One database's answer: its value, or why it could not give one (down, not migrated, or its URL
 *  variable unset: `unsetVariable` names it). */
export type PerStore<T> = { store: string; ok: true; value: T } | { store: string; ok: false; error: string; unsetVariable?: string };

/** Where a store stands for one call: reachable, or why not (CLI --json and the console). */
export interface StoreState {
  store: string;
  reachable: boolean;
  error?: string;
  /** The environment variable that should hold its URL and is not set. */
  unsetVariable?: string;
}

export function storeStates(answers: PerStore<unknown>[]): StoreState[] {
  return answers.map((r) =>
    r.ok
      ? { store: r.store, reachable: true }
      : { store: r.store, reachable: false, error: r.error, ...(r.unsetVariable ? { unsetVariable: r.unsetVariable } : {}) },
  );
}

/** What to tell an operator about a store whose URL variable is unset. */
export function unsetMessage(store: string, variable: string): string {
  return `${variable} is not set: it should hold the URL of store ${store} (businessDatabases.${store}.urlEnv); set it and run again`;
}

/** The rows of every store that answered, each with its store, in the order `order` gives. */
export function mergeRows<R>(answers: PerStore<R[]>[], order?: (a: R, b: R) => number): (R & { store: string })[] {
  const rows = answers.flatMap((r) => (r.ok ? r.value.map((row) => ({ ...row, store: r.store })) : []));
  return order ? rows.sort(order) : rows;
}

export interface StoreDirectoryOptions {
  centerUrl: string;
  /** Store name -> URL and kinds, in the order to show them; `unsetVariable`: its URL variable is
   *  not set (the store is an answer saying so, never a connection). */
  stores?: Map<string, { url: string; kinds: string[]; unsetVariable?: string | undefined }>;
  logger: Logger;
  applicationName: string;
  /** Connections per database (default 2). */
  poolSize?: number;
  /** How long to wait for a connection (default 5 s). */
  connectTimeoutMs?: number;
  /** Cancel a statement running longer than this (default 30 s). */
  statementTimeoutMs?: number;
}

export class StoreDirectory {
  private readonly open = new Map<string, StoreDatabase>();
  private readonly migrated = new Map<string, Promise<void>>();

  constructor(private readonly options: StoreDirectoryOptions) {}

  /** The center (at centerUrl, else the config's) and every store of the config. */
  static fromConfig(config: LoadedConfig, o: Omit<StoreDirectoryOptions, 'stores' | 'centerUrl'> & { centerUrl?: string | undefined }): StoreDirectory {
    const stores = new Map(
      [...storeLayout(config.kinds)].map(([store, kinds]) => [
        store,
        { url: config.businessDatabaseUrls[store] ?? '', kinds, unsetVariable: config.unsetUrls?.[store] },
      ]),
    );
    return new StoreDirectory({ ...o, centerUrl: o.centerUrl ?? config.databaseUrl, stores });
  }

  /** `center` first, then the stores in name order. */
  get names(): string[] {
    return [CENTER, ...(this.options.stores?.keys() ?? [])];
  }

  /** True when the config names stores besides the center. */
  get hasStores(): boolean {
    return (this.options.stores?.size ?? 0) > 0;
  }

  /** The stores that hold `kind`'s timeouts (the center for a center kind). */
  storesOfKind(kind: string): string[] {
    const out = [...(this.options.stores ?? [])].filter(([, s]) => s.kinds.includes(kind)).map(([name]) => name);
    return out.length > 0 ? out : [CENTER];
  }

  /** The kinds stored in a store (undefined for the center: every center kind). */
  kindsOf(store: string): string[] | undefined {
    return store === CENTER ? undefined : this.options.stores?.get(store)?.kinds;
  }

  /** The variable that should hold the store's URL when it is not set; undefined otherwise. */
  unsetVariable(store: string): string | undefined {
    return store === CENTER ? undefined : this.options.stores?.get(store)?.unsetVariable;
  }

  /** The database of a store (or of the center), its pool opened on first use. */
  database(store: string): StoreDatabase {
    const unset = this.unsetVariable(store);
    if (unset) throw new Error(unsetMessage(store, unset));
    const known = this.open.get(store);
    if (known) return known;
    const entry = store === CENTER ? { url: this.options.centerUrl, kinds: undefined } : this.options.stores?.get(store);
    if (!entry) throw new Error(`unknown store ${store}; stores: ${this.names.join(', ')}`);
    const pool = createPool({
      connectionString: entry.url,
      max: this.options.poolSize ?? 2,
      applicationName: this.options.applicationName,
      logger: this.options.logger,
      connectionTimeoutMs: this.options.connectTimeoutMs ?? 5000,
      statementTimeoutMs: this.options.statementTimeoutMs ?? 30_000,
      // The server cancels a statement past its timeout; a connection silent 5 s longer is gone.
      silentAfterMs: (this.options.statementTimeoutMs ?? 30_000) + 5000,
    });
    const opened = { store, url: entry.url, kinds: entry.kinds, pool, db: createKysely(pool) };
    this.open.set(store, opened);
    return opened;
  }

  /** Runs fn on each named store's database in parallel: one answer per store, in order. A store
   *  that does not answer, or whose schema is missing or old, is an answer too (never a throw). */
  async each<T>(stores: readonly string[], fn: (d: StoreDatabase) => Promise<T>): Promise<PerStore<T>[]> {
    return Promise.all(
      stores.map(async (store): Promise<PerStore<T>> => {
        const unset = this.unsetVariable(store);
        if (unset) return { store, ok: false, error: unsetMessage(store, unset), unsetVariable: unset };
        const d = this.database(store);
        try {
          await this.checked(d);
        } catch (err) {
          return { store, ok: false, error: `${redactDbUrl(d.url)}: ${describe(err)}` };
        }
        try {
          return { store, ok: true, value: await fn(d) };
        } catch (err) {
          if (!isUnreachable(err)) throw err;
          return { store, ok: false, error: `${redactDbUrl(d.url)}: ${describe(err)}` };
        }
      }),
    );
  }

  /** The schema is there and current, checked once per database while it answers. */
  private checked(d: StoreDatabase): Promise<void> {
    let check = this.migrated.get(d.store);
    if (!check) {
      check = assertMigrated(d.pool);
      this.migrated.set(d.store, check);
      check.catch(() => this.migrated.delete(d.store));
    }
    return check;
  }

  async close(): Promise<void> {
    // kysely ends a pool only once it has run a query on it; a pool used directly (pg style) is
    // ended here, or its idle clients would keep the process alive for idleTimeoutMillis.
    await Promise.all(
      [...this.open.values()].map(async (d) => {
        await d.db.destroy().catch(() => {});
        if (!d.pool.ended && !d.pool.ending) await d.pool.end().catch(() => {});
      }),
    );
    this.open.clear();
  }
}

/** Errors that mean "this database cannot answer now" (reported per store), as opposed to bad input
 *  or a bug (thrown). */
function isUnreachable(err: unknown): boolean {
  const e = err as { code?: string; name?: string; message?: string };
  if (typeof e.code === 'string') {
    // Connection failures (ECONNREFUSED, ETIMEDOUT, ...) and PostgreSQL's connection, shutdown,
    // missing database and statement-timeout classes.
    return /^E[A-Z]+$/.test(e.code) || /^(08|57|3D)/.test(e.code);
  }
  return /timeout|terminated|Connection/i.test(e.message ?? '');
}

function describe(err: unknown): string {
  const e = err as { code?: string; message?: string };
  return e.message || e.code || String(err);
}
