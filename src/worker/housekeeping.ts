// A worker's housekeeping in one database (the center's, or a store's): a one-connection pool of
// its own, so that lease renewals and heartbeats go on while every slot and every connection of
// the main pool is busy with a shard; the lease keeper on it; and the heartbeat
// (timeout_center.workers, where that database's leader sees which kinds a live worker serves).
// Started before the worker reads shards, stopped after its drain.
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { createPool } from '../db/pool.js';
import { sql } from '../db/queries.js';
import { periodic, ServiceGroup } from '../service.js';
import { LeaseKeeper } from './lease-keeper.js';

export interface HousekeepingOptions {
  url: string;
  /** Where it runs, for the service's name and the connection's application_name. */
  label: string;
  workerId: string;
  /** The kinds the heartbeat says this worker serves there. */
  kinds: string[];
  leaseMs: number;
  /** config databaseSilenceMs (db/silence-watch.ts). */
  silentAfterMs?: number;
  /** worker.goneAfterMs: the heartbeat comes every third of it, so that a leader takes this
   *  worker's shards over only after it missed three (`status` counts a worker gone after 15 s). */
  goneAfterMs: number;
  logger: Logger;
  /** Logged when a heartbeat fails (the next one retries). */
  failureMessage: string;
}

export class Housekeeping {
  readonly pool: pg.Pool;
  readonly leaseKeeper: LeaseKeeper;
  private readonly group: ServiceGroup;

  constructor(private readonly o: HousekeepingOptions) {
    this.pool = createPool({
      connectionString: o.url,
      max: 1,
      applicationName: `timeout-center worker heartbeat${o.label}`,
      logger: o.logger,
      silentAfterMs: o.silentAfterMs,
    });
    this.leaseKeeper = new LeaseKeeper(this.pool, o.leaseMs, o.logger);
    this.group = new ServiceGroup(
      `worker housekeeping${o.label}`,
      [
        this.leaseKeeper,
        periodic(
          `worker-heartbeat${o.label}`,
          Math.max(250, Math.floor(o.goneAfterMs / 3)),
          () => this.heartbeat(),
          (err) => o.logger.warn({ err }, o.failureMessage),
        ),
      ],
      o.logger,
    );
  }

  async heartbeat(): Promise<void> {
    await this.pool.query(sql('worker/heartbeat', { workerId: this.o.workerId, host: hostname(), pid: process.pid, kinds: this.o.kinds }));
  }

  /** The first heartbeat now (a failure fails the start), then the renewals and the beat. */
  async start(): Promise<void> {
    await this.heartbeat();
    await this.group.start();
  }

  /** Stops the renewals (waiting for the round in flight) and the beat, then closes the pool. */
  async stop(): Promise<void> {
    await this.group.stop();
    await this.pool.end().catch(() => {});
  }
}
