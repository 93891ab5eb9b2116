// A long-running process's entry in timeout_center.processes (sql/0024_processes.sql): inserted at
// start with this build's version, touched every 5 s, marked stopped at the end. Each touch also
// reads the schema contract again (schema-contract.ts), so a process meets a schema it can no
// longer run within seconds, including after a reconnect to a database that failed over or was
// restored: it then stops instead of answering its probes while closing nothing.
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { BaseService } from '../service.js';
import { judgeSchema, readSchemaContract, SchemaContractError, thisBuild, type Build } from './schema-contract.js';

export interface ProcessRegistryOptions {
  pool: pg.Pool;
  /** coordinator, worker, all, api, console. */
  role: string;
  logger: Logger;
  /** Called once when the schema no longer runs this build (default: logged only). */
  onIncompatible?: (err: SchemaContractError) => void;
  everyMs?: number;
  build?: Build;
}

export class ProcessRegistry extends BaseService {
  readonly name = 'process-registry';
  readonly processId = `${hostname()}-${process.pid}-${Date.now().toString(36)}`;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private failed = false;
  private readonly build: Build;

  constructor(private readonly o: ProcessRegistryOptions) {
    super();
    this.build = o.build ?? thisBuild();
  }

  protected async onStart(): Promise<void> {
    await this.o.pool.query(`INSERT INTO timeout_center.processes (process_id, role, version, schema_version, host, pid) VALUES ($1, $2, $3, $4, $5, $6)`, [
      this.processId,
      this.o.role,
      this.build.version,
      this.build.schemaVersion,
      hostname(),
      process.pid,
    ]);
    // Rows of processes gone for a week are history nobody reads.
    await this.o.pool
      .query(`DELETE FROM timeout_center.processes WHERE last_seen_at < now() - interval '7 days'`)
      .catch((err: unknown) => this.o.logger.warn({ err }, 'could not delete the registry rows of processes gone for a week'));
    this.timer = setInterval(() => {
      if (this.inFlight) return;
      this.inFlight = this.touch().finally(() => (this.inFlight = undefined));
    }, this.o.everyMs ?? 5000);
  }

  /** One round trip: last_seen_at (the row comes back if a restore lost it), then the contract. */
  private async touch(): Promise<void> {
    try {
      await this.o.pool.query(
        `INSERT INTO timeout_center.processes (process_id, role, version, schema_version, host, pid) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (process_id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL`,
        [this.processId, this.o.role, this.build.version, this.build.schemaVersion, hostname(), process.pid],
      );
      const verdict = judgeSchema(await readSchemaContract(this.o.pool), this.build);
      if (!verdict.ok && !this.failed) {
        this.failed = true;
        const err = new SchemaContractError(`the schema changed under this running process: ${verdict.message}`, verdict.state);
        this.o.logger.error({ state: verdict.state }, err.message);
        this.o.onIncompatible?.(err);
      }
    } catch (err) {
      // The database is away: the pools' own errors say so; the next touch tries again.
      this.o.logger.debug({ err }, 'process registry: could not touch this process row');
    }
  }

  protected async onStop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.inFlight;
    await this.o.pool
      .query('UPDATE timeout_center.processes SET stopped_at = now() WHERE process_id = $1', [this.processId])
      .catch((err: unknown) => this.o.logger.warn({ err }, 'could not mark this process stopped in timeout_center.processes'));
  }
}
