// Flow control across stores (docs/scale.md): the center's database holds each kind's controls
// (one source of truth: pause, resume and limit write there, audited there), and each store's
// leader copies its share into the store before its ticks, at most once a second, where workers'
// take_lease.sql and the store's map read them. A pause applies as is. A cap on shards and a rate
// limit are split evenly between the stores of the kind: each store gets ceil(cap / n) shards and
// rate / n timeouts per second, so the fleet never exceeds the rate, and a store without backlog
// leaves its share unused (the cost of needing no coordination between stores' leaders).
import type pg from 'pg';
import type { Logger } from 'pino';
import { withTransaction } from '../db/pool.js';
import { sql } from '../db/queries.js';

const EVERY_MS = 1000;

export interface ControlRow {
  kind: string;
  paused: boolean;
  max_running_shards: number | null;
  rate_limit: number | null;
}

/** One store's share of the center's controls for a kind stored in `stores` stores. */
export function storeShare(row: ControlRow, stores: number): ControlRow {
  return {
    kind: row.kind,
    paused: row.paused,
    max_running_shards: row.max_running_shards === null ? null : Math.ceil(row.max_running_shards / stores),
    rate_limit: row.rate_limit === null ? null : row.rate_limit / stores,
  };
}

export class SharedControls {
  private lastAt = 0;
  private centerDownSince: number | undefined;

  constructor(
    private readonly center: pg.Pool,
    private readonly store: pg.Pool,
    /** Kind -> how many stores it is spread over. */
    private readonly storesOfKind: Map<string, number>,
    private readonly logger: Logger,
  ) {}

  /** Copies the store's share of the center's controls, unless done within the last second. The
   *  center's database down must not stop a store: the store keeps the controls it last copied
   *  (said once, and again when the center answers). */
  async refresh(force = false): Promise<void> {
    if (!force && Date.now() - this.lastAt < EVERY_MS) return;
    let rows: ControlRow[];
    try {
      ({ rows } = await this.center.query<ControlRow>(sql('stores/center_controls', { kinds: [...this.storesOfKind.keys()] })));
    } catch (err) {
      this.lastAt = Date.now();
      if (this.centerDownSince === undefined) {
        this.centerDownSince = Date.now();
        this.logger.warn({ err }, "the center's database does not answer: this store keeps the flow controls it last copied, and goes on");
      }
      return;
    }
    if (this.centerDownSince !== undefined) {
      this.logger.info({ downMs: Date.now() - this.centerDownSince }, "the center's database answers again: flow controls copied from it again");
      this.centerDownSince = undefined;
    }
    const shares = rows.map((r) => storeShare(r, this.storesOfKind.get(r.kind) ?? 1));
    await withTransaction(this.store, async (client) => {
      await client.query(`SELECT set_config('timeout_center.actor', 'center', true)`);
      await client.query(sql('stores/apply_controls', { controls: JSON.stringify(shares) }));
    });
    this.lastAt = Date.now();
  }
}
