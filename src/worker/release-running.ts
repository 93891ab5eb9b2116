// A drain past its bound (Worker.stop): every shard still running goes back in the database it runs
// in, the center's or its store's, at once instead of after its lease. In each database the worker
// ends its own busy sessions there (terminate_backends.sql: their shard transactions roll back,
// nothing half-applied), then release_running.sql gives the shards back (queued, unpublished: that
// database's leader republishes them within a second). The databases are released side by side,
// each within its bound: one that does not answer leaves its shards to their lease and holds up
// no other.
import type pg from 'pg';
import type { Logger } from 'pino';
import { createClient } from '../db/pool.js';
import { sql } from '../db/queries.js';
import type { Metrics } from '../observability/metrics.js';
import { noAnswer, within } from '../bounded.js';

/** How long one database may take to release its shards (connect 3 s, then two statements). */
export const RELEASE_BOUND_MS = 5000;

/** The backend pid of each connection of a pool checked out now: the sessions of the shards
 *  running there, which a drain past its bound ends. */
export class BusyBackends {
  private readonly busy = new Map<pg.PoolClient, number>();
  private readonly onAcquire = (client: pg.PoolClient) => {
    const pid = (client as unknown as { processID?: number | null }).processID;
    if (pid) this.busy.set(client, pid);
  };
  private readonly onRelease = (_err: Error | undefined, client: pg.PoolClient) => {
    this.busy.delete(client);
  };

  constructor(private readonly pool: pg.Pool) {
    pool.on('acquire', this.onAcquire);
    pool.on('release', this.onRelease);
  }

  get pids(): number[] {
    return [...this.busy.values()];
  }

  detach(): void {
    this.pool.off('acquire', this.onAcquire);
    this.pool.off('release', this.onRelease);
  }
}

/** The shards this worker runs in one database. */
export interface RunningIn {
  /** `center` or the store's name: the `store` label of metrics and logs. */
  store: string;
  url: string;
  /** This process's busy sessions there (BusyBackends.pids). */
  pids: number[];
  shardIds: number[];
}

export interface ReleaseContext {
  workerId: string;
  metrics: Metrics;
  logger: Logger;
  boundMs?: number;
}

/** Releases the running shards of every database, side by side; logs, per database, what went
 *  back and what is left to its lease. Never throws. */
export async function releaseRunning(databases: RunningIn[], ctx: ReleaseContext): Promise<void> {
  const boundMs = ctx.boundMs ?? RELEASE_BOUND_MS;
  await Promise.all(
    databases.map(async (db) => {
      try {
        const rows = await releaseIn(db, ctx.workerId, boundMs);
        for (const r of rows) ctx.metrics.shards.inc({ store: db.store, kind: r.kind, outcome: 'released' });
        const released = rows.map((r) => Number(r.id));
        ctx.logger.warn({ store: db.store, released, leftToLease: db.shardIds.filter((id) => !released.includes(id)) }, 'running shards released');
      } catch (err) {
        const where = db.store === 'center' ? "the center's database" : `store ${db.store}`;
        ctx.logger.warn(
          { err, store: db.store, leftToLease: db.shardIds },
          `could not release the running shards in ${where}; they go to another worker when their lease runs out`,
        );
      }
    }),
  );
}

/** On a connection of its own (the pool's may all be busy, or be the ones it ends). */
async function releaseIn(db: RunningIn, workerId: string, boundMs: number): Promise<{ id: string; kind: string }[]> {
  const client = createClient(db.url, {
    connectionTimeoutMillis: 3000,
    statement_timeout: 3000,
    // statement_timeout is the server's: a server that does not answer is bounded here.
    query_timeout: 3500,
    application_name: 'timeout-center worker stop',
  });
  client.on('error', () => {});
  const work = (async () => {
    await client.connect();
    if (db.pids.length > 0) await client.query(sql('worker/terminate_backends', { pids: db.pids }));
    return (await client.query<{ id: string; kind: string }>(sql('worker/release_running', { shardIds: db.shardIds, workerId }))).rows;
  })();
  try {
    return await within(work, boundMs, noAnswer(`releasing the running shards of ${db.store}`, boundMs));
  } finally {
    // Not awaited: ending a connection to a server that does not answer would wait for it.
    void client.end().catch(() => {});
  }
}
