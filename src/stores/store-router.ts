// schedule(), cancel(), reschedule() and settle() for a service that holds a connection per store rather
// than the order's own transaction (docs/scale.md): each call goes to the database the kind's
// store rule picks for the biz_id (timeout_center.store_of, asked of the first database given),
// the center's for a kind stored there. Inside the order's own transaction, call schedule() etc.
// on that transaction instead: that is the same database, and a wrong one is refused by name.
import { settle, type SettleOptions, type SettleResult } from '../settle/settle.js';
import { cancel, reschedule, schedule, storeOf, TimeoutInputError, type Executor, type ScheduleInput, type ScheduledTimeout } from '../schedule.js';

export class StoreRouter {
  /**
   * @param center the center's database
   * @param stores each store's database, by its name under businessDatabases
   */
  constructor(
    private readonly center: Executor,
    private readonly stores: Record<string, Executor>,
  ) {}

  /** The database that holds (kind, bizId)'s timeout. */
  async databaseOf(kind: string, bizId: ScheduleInput['bizId']): Promise<Executor> {
    const store = await storeOf(this.center, kind, bizId);
    if (store === undefined) return this.center;
    const db = this.stores[store];
    if (!db) throw new TimeoutInputError(`the timeout of ${kind} ${String(bizId)} belongs in store ${store}, and no database was given for it`);
    return db;
  }

  async schedule(input: ScheduleInput): Promise<ScheduledTimeout> {
    return schedule(await this.databaseOf(input.kind, input.bizId), input);
  }

  async cancel(kind: string, bizId: ScheduleInput['bizId']): Promise<boolean> {
    return cancel(await this.databaseOf(kind, bizId), kind, bizId);
  }

  async reschedule(kind: string, bizId: ScheduleInput['bizId'], due: { dueAt: Date } | { delayMs: number }): Promise<boolean> {
    return reschedule(await this.databaseOf(kind, bizId), kind, bizId, due);
  }

  async settle(kind: string, bizId: ScheduleInput['bizId'], options?: SettleOptions): Promise<SettleResult> {
    return settle(await this.databaseOf(kind, bizId), kind, bizId, options);
  }
}
