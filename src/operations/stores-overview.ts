// What each store holds now (docs/scale.md), for `status` and the console: its backlog, its leader
// and epoch, its live workers and failed timeouts, read from the store's own database. A store
// that does not answer is reported as unreachable, with why, instead of failing the whole view.
import type { LoadedConfig } from '../config.js';
import { createClient } from '../db/pool.js';
import type { Queryable } from '../flow/kind-controls.js';
import { redactDbUrl } from '../worker/business-db.js';
import { storeLayout } from '../stores/layout.js';
import { LIVE_WINDOW_S } from './overview.js';

/** A reachable store's figures. */
export interface StoreFigures {
  pendingDue: number;
  inFlight: number;
  oldestLagSeconds: number | null;
  failed: number;
  leader: { holder: string | null; epoch: number } | null;
  liveWorkers: number;
}

export interface StoreOverview extends Partial<StoreFigures> {
  store: string;
  kinds: string[];
  reachable: boolean;
  /** Why it is unreachable (connection refused, timeout, not migrated). */
  error?: string;
}

/** One store's figures, read from its database. */
export async function readStoreFigures(db: Queryable): Promise<StoreFigures> {
  const { rows } = await db.query<{
    pending_due: number;
    in_flight: number;
    lag_s: number | null;
    failed: number;
    holder: string | null;
    epoch: string;
    live: number;
  }>(
    `SELECT (SELECT coalesce(sum(pending_due), 0)::int FROM timeout_center.backlog) AS pending_due,
            (SELECT coalesce(sum(in_flight), 0)::int FROM timeout_center.backlog) AS in_flight,
            (SELECT max(extract(epoch FROM oldest_lag))::float8 FROM timeout_center.backlog) AS lag_s,
            (SELECT count(*)::int FROM timeout_center.timeouts WHERE state = 'failed') AS failed,
            l.holder, l.epoch::text AS epoch,
            (SELECT count(*)::int FROM timeout_center.workers
              WHERE stopped_at IS NULL AND last_seen_at > now() - make_interval(secs => $1)) AS live
       FROM timeout_center.coordinator_lease l WHERE l.id = 1`,
    [LIVE_WINDOW_S],
  );
  const r = rows[0]!;
  return {
    pendingDue: r.pending_due,
    inFlight: r.in_flight,
    oldestLagSeconds: r.lag_s,
    failed: r.failed,
    leader: Number(r.epoch) > 0 ? { holder: r.holder, epoch: Number(r.epoch) } : null,
    liveWorkers: r.live,
  };
}

/** Every store of the config, each read on its own short-lived connection, in parallel. */
export async function storesOverview(config: LoadedConfig, timeoutMs = 3000): Promise<StoreOverview[]> {
  return Promise.all(
    [...storeLayout(config.kinds)].map(async ([store, kinds]) => {
      const url = config.businessDatabaseUrls[store] ?? '';
      const client = createClient(url, {
        connectionTimeoutMillis: timeoutMs,
        statement_timeout: timeoutMs,
        application_name: 'timeout-center status',
      });
      client.on('error', () => {});
      try {
        await client.connect();
        return { store, kinds, reachable: true, ...(await readStoreFigures(client)) };
      } catch (err) {
        return { store, kinds, reachable: false, error: `${redactDbUrl(url)}: ${(err as Error).message}` };
      } finally {
        await client.end().catch(() => {});
      }
    }),
  );
}
