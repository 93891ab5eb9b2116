// The systems under test, each behind one Driver: prepare its schema in a fresh database,
// schedule timeouts for a range of orders, start its consumer processes, stop them (reporting
// their peak RSS). Consumers always run as separate OS processes: timeout-center through its CLI,
// the peers through bench/runner.ts, so the bench process (loader + monitor) never shares a
// heap or an event loop with the system it measures.
import { spawn } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { PgBoss } from 'pg-boss';
import { makeWorkerUtils, type WorkerUtils } from 'graphile-worker';
import { Queue } from 'bullmq';
import { CliProcess, runCli, spawnCli } from '../../test/helpers/processes.ts';
import { writeConfig } from '../../test/helpers/orders.ts';
import { BULL_QUEUE, CLOSE_MANY_SQL, KIND, bullConnection } from './orders.ts';
import { MINIMAL_DDL, MINIMAL_INSERT, type LimitSchema } from './limit.ts';

export type SystemName = 'timeout-center' | 'minimal-sql' | 'pure-sql' | 'pg-boss-batch' | 'pg-boss-job' | 'graphile-worker' | 'bullmq';

export interface Variant {
  /** unique id, e.g. tc-default */
  id: string;
  system: SystemName;
  /** short label for tables and charts */
  label: string;
  /** what was set (written to docs/benchmarks.md) */
  settings: Record<string, unknown>;
}

export interface ProcessStats {
  name: string;
  peakRssMb: number;
  /** user + system CPU time of the process so far */
  cpuSeconds?: number;
}

export interface Driver {
  /** which timeouts table the system drains (checked at the end: none due left unfinished) */
  readonly timeoutsTable: 'ours' | 'minimal' | undefined;
  /** Rough cost of scheduling one timeout (µs), to pick how far ahead a burst is due. */
  readonly scheduleCostUs: number;
  prepare(): Promise<void>;
  /** Schedules one timeout per order in [from, to], all due at dueAt. */
  schedule(from: number, to: number, dueAt: Date): Promise<void>;
  /** Closes the bench-side connections used only for scheduling (burst: before the drain). */
  endLoading(): Promise<void>;
  start(): Promise<void>;
  /** Live consumer processes (for the monitor). */
  readonly processes: CliProcess[];
  stop(): Promise<ProcessStats[]>;
  close(): Promise<void>;
}

export interface DriverContext {
  databaseUrl: string;
  redisUrl: string;
  /** timeout-center only: its Redis as environment variables instead of REDIS_URL (a cluster). */
  redisEnv?: Record<string, string> | undefined;
  /** Redis key prefix owned by this run */
  redisPrefix: string;
  /** the bench's own pool on the system's database */
  pool: pg.Pool;
}

const RUNNER = fileURLToPath(new URL('../runner.ts', import.meta.url));
export { KIND };

/** Peak resident set (VmHWM) of a live process, in MB. */
export function peakRssMb(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = /VmHWM:\s+(\d+) kB/.exec(status);
    return m ? Math.round(Number(m[1]) / 1024) : 0;
  } catch {
    return 0;
  }
}

/** CPU time (user + system) of a live process, in seconds. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return 0;
  }
}

async function stopAll(procs: CliProcess[]): Promise<ProcessStats[]> {
  const stats = procs.map((p) => ({ name: p.name, peakRssMb: peakRssMb(p.pid), cpuSeconds: cpuSeconds(p.pid) }));
  await Promise.all(procs.map((p) => p.stop(20_000)));
  return stats;
}

function spawnRunner(name: string, system: string, options: Record<string, unknown>): CliProcess {
  const child = spawn(process.execPath, ['--experimental-transform-types', '--no-warnings', RUNNER, system, JSON.stringify(options)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new CliProcess(name, child);
}

async function waitReady(proc: CliProcess, msg: string | RegExp, timeoutMs = 60_000): Promise<void> {
  await Promise.race([
    proc.waitForMsg(msg, timeoutMs),
    proc.exited.then(({ code }) => {
      throw new Error(`${proc.name} exited (${code}) before it was ready: ${proc.stderr.slice(-2000)}`);
    }),
  ]);
}

/** Deletes this run's keys (never FLUSHALL: the Redis is shared). */
export async function deleteRedisPrefix(redisUrl: string, prefix: string): Promise<void> {
  const redis = new Redis(redisUrl, { lazyConnect: false, maxRetriesPerRequest: 3 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------
// timeout-center and the pure-SQL limit share the timeout_center schema (so the limit reads the
// very same table and indexes).

async function insertTimeouts(pool: pg.Pool, from: number, to: number, dueAt: Date): Promise<void> {
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $4, i::text, $3 FROM generate_series($1::bigint, $2::bigint) i`,
    [from, to, dueAt, KIND],
  );
}

export interface TcSettings {
  workers: number;
  concurrency: number;
  /** worker.databaseConcurrency: same-database SQL shards at once per worker */
  databaseConcurrency: number;
  shardSize: number;
  claimChunk: number;
  maxInFlightShards: number;
  minTickIntervalMs: number;
  /** Another build's dist/cli/main.js (--ref): the same driver runs an earlier checkout. */
  cli?: string;
  /** More environment for timeout-center's processes (bench:tracing: the OTEL_* variables). */
  env?: Record<string, string>;
}

/** The product's defaults (src/config.ts), written out so the settings table shows them. */
export const TC_DEFAULTS: TcSettings = {
  workers: 1,
  concurrency: 4,
  databaseConcurrency: 2,
  shardSize: 500,
  claimChunk: 50_000,
  maxInFlightShards: 64,
  minTickIntervalMs: 20,
};

class TimeoutCenterDriver implements Driver {
  readonly timeoutsTable: 'ours' | 'minimal' | undefined = 'ours';
  readonly scheduleCostUs = 15;
  processes: CliProcess[] = [];
  private reported = false;
  private configPath = '';
  protected readonly ctx: DriverContext;
  private readonly s: TcSettings;
  constructor(ctx: DriverContext, s: TcSettings) {
    this.ctx = ctx;
    this.s = s;
  }

  get env() {
    // BENCH_TC_NODE_OPTIONS reaches only timeout-center's processes, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
    const redis = this.ctx.redisEnv ? { REDIS_URL: undefined, ...this.ctx.redisEnv } : { REDIS_URL: this.ctx.redisUrl };
    return { DATABASE_URL: this.ctx.databaseUrl, ...redis, NODE_OPTIONS: process.env['BENCH_TC_NODE_OPTIONS'], ...this.s.env };
  }

  async prepare() {
    this.configPath = writeConfig({
      redisKeyPrefix: this.ctx.redisPrefix,
      kinds: { [KIND]: { shardSize: this.s.shardSize, handler: { type: 'sql', sql: CLOSE_MANY_SQL } } },
      coordinator: { claimChunk: this.s.claimChunk, maxInFlightShards: this.s.maxInFlightShards, minTickIntervalMs: this.s.minTickIntervalMs },
      worker: { concurrency: this.s.concurrency, databaseConcurrency: this.s.databaseConcurrency },
      // A flood must not page anyone: the lag alert is not what is measured.
      alerts: { lagSlaMs: 3_600_000 },
      // BENCH_TC_LOG_LEVEL=debug: each shard's phases (lease, claim + handler, finish, commit) are
      // summed up on stderr when the system stops.
      ...(process.env['BENCH_TC_LOG_LEVEL'] ? { logLevel: process.env['BENCH_TC_LOG_LEVEL'] as 'debug' } : {}),
    });
    const r = await runCli(['migrate', '-c', this.configPath], this.env, 60_000, this.s.cli);
    if (r.code !== 0) throw new Error(`timeout-center migrate failed: ${r.stderr}`);
  }

  schedule(from: number, to: number, dueAt: Date) {
    return insertTimeouts(this.ctx.pool, from, to, dueAt);
  }

  async endLoading() {}

  async start() {
    this.reported = false;
    const coordinator = spawnCli('tc coordinator', ['coordinator', '-c', this.configPath], this.env, this.s.cli);
    const workers = Array.from({ length: this.s.workers }, (_, i) => spawnCli(`tc worker ${i + 1}`, ['worker', '-c', this.configPath], this.env, this.s.cli));
    this.processes = [coordinator, ...workers];
    await Promise.all([waitReady(coordinator, 'became leader'), ...workers.map((w) => waitReady(w, 'worker started'))]);
  }

  stop() {
    // stop() runs again in the bench's cleanup: report (and dump) each run's lines once.
    if (this.reported) return stopAll(this.processes);
    this.reported = true;
    const phases = this.processes.flatMap((p) => p.lines.filter((l) => l.msg === 'shard done'));
    if (phases.length > 0) {
      const keys = ['leaseMs', 'claimApplyMs', 'finishMs', 'commitMs'] as const;
      const sum = Object.fromEntries(keys.map((k) => [k, Math.round(phases.reduce((a, l) => a + Number(l[k] ?? 0), 0))]));
      process.stderr.write(`PHASES ${phases.length} shards, total ms ${JSON.stringify(sum)}\n`);
    }
    if (process.env.BENCH_TC_LOG_DUMP) {
      const all = this.processes.flatMap((p) => p.lines.map((l) => JSON.stringify({ proc: p.name, ...l })));
      appendFileSync(process.env.BENCH_TC_LOG_DUMP, all.join('\n') + '\n');
    }
    return stopAll(this.processes);
  }

  async close() {
    // A private cluster (redis-modes.ts) is thrown away with its keys.
    if (!this.ctx.redisEnv) await deleteRedisPrefix(this.ctx.redisUrl, this.ctx.redisPrefix);
  }
}

export interface SqlSettings {
  connections: number;
  limit: number;
  /** How the claim is spelled: id IN (SELECT ...) (default) or id = ANY (ARRAY(SELECT ...)). */
  form?: 'in' | 'array';
  /** Which table: the minimal schema (the physical reference) or ours (default). */
  schema?: LimitSchema;
}

class PureSqlDriver extends TimeoutCenterDriver {
  override readonly scheduleCostUs = 15;
  override readonly timeoutsTable: 'ours' | 'minimal';
  private readonly sql: SqlSettings;
  constructor(ctx: DriverContext, sql: SqlSettings) {
    super(ctx, TC_DEFAULTS);
    this.sql = sql;
    this.timeoutsTable = sql.schema ?? 'ours';
  }

  override async prepare() {
    if (this.timeoutsTable === 'minimal') await this.ctx.pool.query(MINIMAL_DDL);
    else await super.prepare();
  }

  override schedule(from: number, to: number, dueAt: Date) {
    if (this.timeoutsTable === 'minimal') return this.ctx.pool.query(MINIMAL_INSERT, [from, to, dueAt]).then(() => {});
    return super.schedule(from, to, dueAt);
  }

  override async start() {
    const p = spawnRunner('pure-sql loop', 'pure-sql', { databaseUrl: this.ctx.databaseUrl, ...this.sql });
    this.processes = [p];
    await waitReady(p, 'ready');
  }

  override async close() {}
}

// ---------------------------------------------------------------------------------------------

export interface PgBossSettings {
  batchSize: number;
  localConcurrency: number;
  pollingIntervalSeconds: number;
  transactional: boolean;
  poolMax: number;
}

export const PGBOSS_QUEUE = 'close-order';

class PgBossDriver implements Driver {
  readonly timeoutsTable = undefined;
  readonly scheduleCostUs = 120;
  processes: CliProcess[] = [];
  private boss: PgBoss | undefined;
  private readonly ctx: DriverContext;
  private readonly s: PgBossSettings;
  constructor(ctx: DriverContext, s: PgBossSettings) {
    this.ctx = ctx;
    this.s = s;
  }

  async prepare() {
    this.boss = new PgBoss({ connectionString: this.ctx.databaseUrl, max: 3, supervise: false, schedule: false });
    this.boss.on('error', () => {});
    await this.boss.start();
    await this.boss.createQueue(PGBOSS_QUEUE);
  }

  async schedule(from: number, to: number, dueAt: Date) {
    for (let a = from; a <= to; a += 5000) {
      const b = Math.min(to, a + 4999);
      const jobs = [];
      for (let id = a; id <= b; id++) jobs.push({ data: { id }, startAfter: dueAt });
      await this.boss!.insert(PGBOSS_QUEUE, jobs);
    }
  }

  async endLoading() {
    await this.boss?.stop({ graceful: false, close: true }).catch(() => {});
    this.boss = undefined;
  }

  async start() {
    const p = spawnRunner('pg-boss worker', 'pg-boss', { databaseUrl: this.ctx.databaseUrl, ...this.s });
    this.processes = [p];
    await waitReady(p, 'ready');
  }

  stop() {
    return stopAll(this.processes);
  }

  async close() {
    await this.boss?.stop({ graceful: false, close: true }).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------

export interface GraphileSettings {
  concurrency: number;
  maxPoolSize: number;
  pollInterval: number;
  localQueueSize: number;
  completeJobBatchDelay: number;
}

class GraphileDriver implements Driver {
  readonly timeoutsTable = undefined;
  readonly scheduleCostUs = 100;
  processes: CliProcess[] = [];
  private utils: WorkerUtils | undefined;
  private readonly ctx: DriverContext;
  private readonly s: GraphileSettings;
  constructor(ctx: DriverContext, s: GraphileSettings) {
    this.ctx = ctx;
    this.s = s;
  }

  async prepare() {
    this.utils = await makeWorkerUtils({ connectionString: this.ctx.databaseUrl, maxPoolSize: 3 });
    await this.utils.migrate();
  }

  async schedule(from: number, to: number, dueAt: Date) {
    for (let a = from; a <= to; a += 5000) {
      const b = Math.min(to, a + 4999);
      const specs = [];
      for (let id = a; id <= b; id++) specs.push({ identifier: 'close_order', payload: { id }, runAt: dueAt });
      await this.utils!.addJobs(specs);
    }
  }

  async endLoading() {
    await Promise.resolve(this.utils?.release()).catch(() => {});
    this.utils = undefined;
  }

  async start() {
    const p = spawnRunner('graphile-worker', 'graphile-worker', { databaseUrl: this.ctx.databaseUrl, ...this.s });
    this.processes = [p];
    await waitReady(p, 'ready');
  }

  stop() {
    return stopAll(this.processes);
  }

  async close() {
    await Promise.resolve(this.utils?.release()).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------

export interface BullSettings {
  concurrency: number;
  poolMax: number;
  workers: number;
}

class BullDriver implements Driver {
  readonly timeoutsTable = undefined;
  readonly scheduleCostUs = 120;
  processes: CliProcess[] = [];
  private queue: Queue | undefined;
  private readonly ctx: DriverContext;
  private readonly s: BullSettings;
  constructor(ctx: DriverContext, s: BullSettings) {
    this.ctx = ctx;
    this.s = s;
  }

  async prepare() {
    this.queue = new Queue(BULL_QUEUE, { connection: bullConnection(this.ctx.redisUrl), prefix: this.ctx.redisPrefix });
    await this.queue.waitUntilReady();
  }

  async schedule(from: number, to: number, dueAt: Date) {
    for (let a = from; a <= to; a += 1000) {
      const b = Math.min(to, a + 999);
      const delay = Math.max(0, dueAt.getTime() - Date.now());
      const jobs = [];
      for (let id = a; id <= b; id++) jobs.push({ name: 'close', data: { id }, opts: { delay, removeOnComplete: true, removeOnFail: 1000 } });
      await this.queue!.addBulk(jobs);
    }
  }

  async endLoading() {}

  async start() {
    this.processes = Array.from({ length: this.s.workers }, (_, i) =>
      spawnRunner(`bullmq worker ${i + 1}`, 'bullmq', {
        databaseUrl: this.ctx.databaseUrl,
        redisUrl: this.ctx.redisUrl,
        prefix: this.ctx.redisPrefix,
        ...this.s,
      }),
    );
    await Promise.all(this.processes.map((p) => waitReady(p, 'ready')));
  }

  stop() {
    return stopAll(this.processes);
  }

  async close() {
    await this.queue?.close().catch(() => {});
    await deleteRedisPrefix(this.ctx.redisUrl, this.ctx.redisPrefix);
  }
}

export function makeDriver(v: Variant, ctx: DriverContext): Driver {
  switch (v.system) {
    case 'timeout-center':
      return new TimeoutCenterDriver(ctx, v.settings as unknown as TcSettings);
    case 'pure-sql':
      return new PureSqlDriver(ctx, { ...(v.settings as unknown as SqlSettings), schema: 'ours' });
    case 'minimal-sql':
      return new PureSqlDriver(ctx, { ...(v.settings as unknown as SqlSettings), schema: 'minimal' });
    case 'pg-boss-batch':
    case 'pg-boss-job':
      return new PgBossDriver(ctx, v.settings as unknown as PgBossSettings);
    case 'graphile-worker':
      return new GraphileDriver(ctx, v.settings as unknown as GraphileSettings);
    case 'bullmq':
      return new BullDriver(ctx, v.settings as unknown as BullSettings);
  }
}
