// A long-running process's entry in timeout_center.processes (sql/0024_processes.sql): inserted at
// start with this build's version, touched every 5 s, marked stopped at the end. Each touch also
// reads the schema contract again (schema-contract.ts), so a process meets a schema it can no
// longer run within seconds, including after a reconnect to a database that failed over or was
// restored: it then stops instead of answering its probes while closing nothing.
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { BaseService, periodic, type Service } from '../service.js';
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
  private failed = false;
  private readonly build: Build;
  private readonly timer: Service;

  constructor(private readonly o: ProcessRegistryOptions) {
    super();
    this.build = o.build ?? thisBuild();
    // A touch that fails (the database is away) says so at debug level: the pools' own errors
    // tell the operator; the next touch tries again.
    this.timer = periodic(
      'process-registry',
      o.everyMs ?? 5000,
      () => this.touch(),
      (err) => o.logger.debug({ err }, 'process registry: could not touch this process row'),
    );
  }

  protected async onStart(): Promise<void> {
    await this.register();
    // Rows of processes gone for a week are history nobody reads.
    await this.o.pool
      .query(`DELETE FROM timeout_center.processes WHERE last_seen_at < now() - interval '7 days'`)
      .catch((err: unknown) => this.o.logger.warn({ err }, 'could not delete the registry rows of processes gone for a week'));
    await this.timer.start();
  }

  /** This process's row: inserted, or touched (last_seen_at; back if a restore lost it). */
  private async register(): Promise<void> {
    await this.o.pool.query(
      `INSERT INTO timeout_center.processes (process_id, role, version, schema_version, host, pid) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (process_id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL`,
      [this.processId, this.o.role, this.build.version, this.build.schemaVersion, hostname(), process.pid],
    );
  }

  /** The row touched, then the contract read again. */
  private async touch(): Promise<void> {
    await this.register();
    const verdict = judgeSchema(await readSchemaContract(this.o.pool), this.build);
    if (!verdict.ok && !this.failed) {
      this.failed = true;
      const err = new SchemaContractError(`the schema changed under this running process: ${verdict.message}`, verdict.state);
      this.o.logger.error({ state: verdict.state }, err.message);
      this.o.onIncompatible?.(err);
    }
  }

  protected async onStop(): Promise<void> {
    await this.timer.stop();
    await this.o.pool
      .query('UPDATE timeout_center.processes SET stopped_at = now() WHERE process_id = $1', [this.processId])
      .catch((err: unknown) => this.o.logger.warn({ err }, 'could not mark this process stopped in timeout_center.processes'));
  }
}
