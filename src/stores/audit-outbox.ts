// One audit log across stores (sql/0015): an operator action on a store's timeouts is recorded in
// the store's audit_log in the transaction that makes it, and copied from there into the center's
// audit_log, the one the console and operators read. The verb that acted copies right away; the
// store's leader copies whatever is left (the center was down at the time) every few seconds.
import type { Logger } from 'pino';
import { sql } from '../db/queries.js';
import type { Queryable } from '../flow/kind-controls.js';

const BATCH = 500;
const EVERY_MS = 5000;

interface OutboxRow {
  id: string;
  at: Date;
  actor: string;
  action: string;
  kind: string | null;
  target: string | null;
  details: unknown;
}

/** Copies the store's audit rows into the center and deletes them from the store; how many. A
 *  crash between the two leaves copies the next call recognises (never a row twice, never none). */
export async function forwardStoreAudit(store: Queryable, center: Queryable, storeName: string): Promise<number> {
  let moved = 0;
  for (;;) {
    const outbox = sql('stores/store_audit_outbox', { limit: BATCH });
    const { rows } = await store.query<OutboxRow>(outbox.text, outbox.values);
    if (rows.length === 0) return moved;
    const copy = sql('stores/copy_store_audit', { store: storeName, rows: JSON.stringify(rows) });
    await center.query(copy.text, copy.values);
    const remove = sql('stores/delete_store_audit', { ids: rows.map((r) => Number(r.id)) });
    await store.query(remove.text, remove.values);
    moved += rows.length;
    if (rows.length < BATCH) return moved;
  }
}

/** After an action in a store: its audit rows into the center now. False when that failed: they
 *  wait in the store, and its leader copies them later (never an error for the action). */
export async function forwardStoreAuditNow(store: Queryable, center: Queryable, storeName: string): Promise<boolean> {
  try {
    await forwardStoreAudit(store, center, storeName);
    return true;
  } catch {
    return false;
  }
}

/** The store leader's share: forwards at most every 5 s; the center down is said once, not fatal. */
export class AuditOutbox {
  private lastAt = 0;
  private centerDown = false;

  constructor(
    private readonly store: Queryable,
    private readonly center: Queryable,
    private readonly storeName: string,
    private readonly logger: Logger,
  ) {}

  async flush(): Promise<void> {
    if (Date.now() - this.lastAt < EVERY_MS) return;
    this.lastAt = Date.now();
    try {
      const moved = await forwardStoreAudit(this.store, this.center, this.storeName);
      if (moved > 0) this.logger.info({ moved }, "copied this store's audit rows to the center's audit_log");
      if (this.centerDown) this.logger.info("audit rows reach the center's audit_log again");
      this.centerDown = false;
    } catch (err) {
      if (!this.centerDown)
        this.logger.warn({ err }, "could not copy this store's audit rows to the center; they wait in the store and are copied when it answers");
      this.centerDown = true;
    }
  }
}
