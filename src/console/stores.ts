// The databases the console reads and acts on (docs/scale.md "Acting across stores"): the center's,
// through the console's own pool, and, with a config that names stores, each store's, through a
// StoreDirectory (pools opened on first use, short timeouts). A store that does not answer is an
// answer too ("unreachable, with why"): lists show the others, an action there says it did
// nothing there. Without stores, everything is the center, as before.
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Config } from '../config.js';
import type { Database } from '../db/schema.js';
import { forwardStoreAuditNow } from '../stores/audit-outbox.js';
import { placeBizIds } from '../stores/place-biz-ids.js';
import { CENTER, type PerStore, type StoreDatabase, type StoreDirectory } from '../stores/store-directory.js';
import { HttpError } from './http.js';

export { CENTER, mergeRows, storeStates, type PerStore, type StoreState } from '../stores/store-directory.js';

export class ConsoleStores {
  private readonly center: StoreDatabase;

  constructor(
    center: { pool: pg.Pool; db: Kysely<Database> },
    private readonly directory?: StoreDirectory,
    /** The config's kinds: where a beside kind's business object lives. */
    private readonly kinds?: Config['kinds'],
  ) {
    this.center = { store: CENTER, url: '', kinds: undefined, ...center };
  }

  /** True when the config names stores: rows and results then name their store. */
  get multi(): boolean {
    return Boolean(this.directory?.hasStores);
  }

  /** `center` first, then the stores in name order. */
  get names(): string[] {
    return this.directory?.names ?? [CENTER];
  }

  /** The stores a request covers: the one it names (checked), else all of them. */
  scope(store: string | null | undefined): string[] {
    if (!store) return this.names;
    if (!this.names.includes(store)) throw new HttpError(404, `no store ${store}; stores: ${this.names.join(', ')}`);
    return [store];
  }

  /** The stores that hold kind's timeouts (the center for a center kind). */
  storesOfKind(kind: string): string[] {
    return this.directory?.storesOfKind(kind) ?? [CENTER];
  }

  /** The kinds stored in a store (every center kind for the center: undefined). */
  kindsOf(store: string): string[] | undefined {
    return store === CENTER ? undefined : this.directory?.database(store).kinds;
  }

  /** fn on each store, in parallel, one answer each in order. The center answers through the
   *  console's pool (its errors fail the request, as without stores); a store that does not
   *  answer is an answer saying why. */
  async each<T>(stores: readonly string[], fn: (d: StoreDatabase) => Promise<T>): Promise<PerStore<T>[]> {
    const others = stores.filter((s) => s !== CENTER);
    const [center, answers] = await Promise.all([
      stores.includes(CENTER) ? fn(this.center) : undefined,
      others.length > 0 && this.directory ? this.directory.each(others, fn) : Promise.resolve([]),
    ]);
    const byStore = new Map(answers.map((a) => [a.store, a]));
    return stores.map((s) => (s === CENTER ? { store: s, ok: true, value: center as T } : byStore.get(s)!));
  }

  /** fn in one store; a store that does not answer is a 503 naming it (nothing was done there). */
  async one<T>(store: string, fn: (d: StoreDatabase) => Promise<T>): Promise<T> {
    this.scope(store);
    const [answer] = await this.each([store], fn);
    if (!answer!.ok) throw new HttpError(503, `store ${store} is UNREACHABLE (${answer!.error}): nothing was read or done there; try again when it answers`);
    return answer!.value;
  }

  /** The store that holds (kind, bizId)'s timeout: the center for a center kind; for a kind stored
   *  beside its orders, the store its rule picks (evaluated by the center's route_target). */
  async place(kind: string, bizId: string): Promise<string> {
    if (!this.multi || !this.kinds || this.storesOfKind(kind)[0] === CENTER) return CENTER;
    const placement = await placeBizIds(this.center.pool, this.kinds, kind, [bizId]);
    if (!placement) return CENTER;
    if (placement.unroutable.length > 0) {
      throw new HttpError(400, `the store rule of ${kind} cannot place ${JSON.stringify(bizId)}: modulo and range take integer ids`);
    }
    return [...placement.byStore.keys()][0]!;
  }

  /** After an action in a store: its audit rows into the center's audit_log now (sql/0015). False
   *  when that failed: they wait in the store, and its leader copies them later. */
  async forwardAudit(store: string): Promise<boolean> {
    if (store === CENTER || !this.directory) return true;
    return forwardStoreAuditNow(this.directory.database(store).pool, this.center.pool, store);
  }
}

/** The note added to an action's result when its audit rows could not reach the center yet. */
export const AUDIT_WAITS = "(audited in the store; the center's database did not answer: the store's leader copies the record to its audit_log when it does)";
