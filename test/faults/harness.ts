// Shared set-up of the fault scenarios: a database with the orders fixture, a config with short
// leases so recovery takes seconds, seeding of orders + timeouts in one statement each, and the
// CLI processes (coordinator / worker) as separate OS processes. Every scenario ends with
// expectInvariants(): I1-I4 in SQL, plus "effects = applied timeouts".
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { pino } from 'pino';
import { expect } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import type { ConfigInput } from '../../src/config.js';
import {
  checkInvariants,
  CLOSE_SQL,
  CLOSE_SQL_COLOCATED,
  createColocatedOrdersSchema,
  createOrdersSchema,
  waitForDrain,
  writeConfig,
  type Invariants,
} from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess, type LogLine } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';

export const KIND = 'order.unpaid';

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

export interface ScenarioOptions {
  /** A database URL to use as is (a private server); default: a fresh database on the shared one. */
  databaseUrl?: string;
  /** Default: the shared test Redis with a key prefix of its own. */
  redisUrl?: string;
  /** Instead of REDIS_URL: e.g. { REDIS_CLUSTER: 'host:port,...' } or REDIS_SENTINELS + REDIS_SENTINEL_NAME. */
  redisEnv?: Record<string, string>;
  /** More kinds beside KIND, with the same settings (seed(n, { kind })). */
  extraKinds?: string[];
  coordinator?: DeepPartial<NonNullable<ConfigInput['coordinator']>>;
  worker?: DeepPartial<NonNullable<ConfigInput['worker']>>;
  kind?: Partial<NonNullable<ConfigInput['kinds']>[string]>;
  alerts?: DeepPartial<NonNullable<ConfigInput['alerts']>>;
  poolSize?: number;
  /** config databaseSilenceMs (default: the product's). */
  databaseSilenceMs?: number;
  logLevel?: 'info' | 'debug';
  /** On a Citus database: orders and order_transitions distributed on the bucket and colocated with
   *  the timeouts (createColocatedOrdersSchema), the kind's handler CLOSE_SQL_COLOCATED. */
  colocatedOrders?: boolean;
}

export class Scenario {
  readonly procs: CliProcess[] = [];
  readonly started = Date.now();

  private constructor(
    readonly label: string,
    readonly databaseUrl: string,
    readonly redisUrl: string,
    readonly prefix: string,
    readonly configPath: string,
    readonly pool: pg.Pool,
    private readonly db: TestDatabase | undefined,
    private readonly redisEnv: Record<string, string> | undefined,
  ) {}

  /** The database has the Citus layout (src/db/citus-layout.ts): inserts name the bucket. */
  citus = false;
  /** orders and order_transitions are distributed on the bucket, colocated with the timeouts. */
  colocated = false;

  static async create(label: string, options: ScenarioOptions = {}): Promise<Scenario> {
    const db = options.databaseUrl ? undefined : await createTestDatabase(label);
    const databaseUrl = options.databaseUrl ?? db!.url;
    const redisUrl = options.redisUrl ?? TEST_REDIS_URL;
    const prefix = testKeyPrefix(label);
    const kindSettings = {
      shardSize: 100,
      maxAttempts: 3,
      backoffMs: 100,
      timeLimitMs: 2000,
      handler: { type: 'sql', sql: options.colocatedOrders ? CLOSE_SQL_COLOCATED : CLOSE_SQL },
      ...options.kind,
    } as NonNullable<ConfigInput['kinds']>[string];
    const config: ConfigInput = {
      redisKeyPrefix: prefix,
      poolSize: options.poolSize ?? 3,
      ...(options.databaseSilenceMs ? { databaseSilenceMs: options.databaseSilenceMs } : {}),
      logLevel: options.logLevel ?? 'info',
      kinds: Object.fromEntries([KIND, ...(options.extraKinds ?? [])].map((k) => [k, kindSettings])),
      coordinator: {
        lockTtlMs: 2000,
        republishAfterMs: 2000,
        maxInFlightShards: 16,
        minTickIntervalMs: 50,
        lagCheckIntervalMs: 1000,
        ...options.coordinator,
      },
      worker: { leaseMs: 3000, blockMs: 200, concurrency: 2, drainTimeoutMs: 3000, ...options.worker },
      alerts: { lagSlaMs: 60_000, ...options.alerts },
    };
    const configPath = writeConfig(config);
    // createPool: it reads multi-host connection strings (a failover test's) and already listens
    // for 'error' (a private server restarting under the test's own pool).
    const pool = createPool({ connectionString: databaseUrl, max: 4, applicationName: 'fault test', logger: pino({ level: 'silent' }) });
    await createOrdersSchema(pool);
    const s = new Scenario(label, databaseUrl, options.redisEnv ? '' : redisUrl, prefix, configPath, pool, db, options.redisEnv);
    const migrated = await runCli(['migrate', '--config', configPath], s.env());
    if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
    s.citus = (await pool.query<{ citus: boolean }>("SELECT to_regclass('timeout_center.layout') IS NOT NULL AS citus")).rows[0]!.citus;
    if (options.colocatedOrders) {
      if (!s.citus) throw new Error('colocatedOrders needs a Citus database');
      await createColocatedOrdersSchema(pool);
      s.colocated = true;
    }
    return s;
  }

  env(extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
    const redis = this.redisEnv ? { REDIS_URL: undefined, ...this.redisEnv } : { REDIS_URL: this.redisUrl };
    return { DATABASE_URL: this.databaseUrl, ...redis, TC_FAILPOINTS: undefined, ...extra };
  }

  /** Inserts orders [from, from+n) unpaid and their timeouts, due dueInMs from now (PostgreSQL's
   *  now()), spread evenly over spreadMs. `poison` order ids refuse to close. */
  async seed(
    n: number,
    opts: { from?: number; dueInMs?: number; spreadMs?: number; poison?: number[]; kind?: string } = {},
  ): Promise<{ from: number; to: number }> {
    const from = opts.from ?? 1;
    const to = from + n - 1;
    const orderBucket = this.colocated ? [', bucket', ', timeout_center.bucket_of(g::text)'] : ['', ''];
    await this.pool.query(
      `INSERT INTO orders (id, status, poison${orderBucket[0]}) SELECT g, 'unpaid', g = ANY($3::bigint[])${orderBucket[1]} FROM generate_series($1::bigint, $2::bigint) g`,
      [from, to, opts.poison ?? []],
    );
    // On the Citus layout the insert names each row's bucket (docs/scale.md).
    const bucket = this.citus ? ['', ', bucket', ', timeout_center.bucket_of(g::text)'] : ['', '', ''];
    await this.pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at${bucket[1]})
       SELECT $5, g::text, now() + ($3::float8 + $4::float8 * (g - $1) / greatest($2 - $1, 1)) * interval '1 millisecond'${bucket[2]}
         FROM generate_series($1::bigint, $2::bigint) g`,
      [from, to, opts.dueInMs ?? 0, opts.spreadMs ?? 0, opts.kind ?? KIND],
    );
    // When the last seeded row falls due, on PostgreSQL's clock (an upper bound: the INSERT's now()
    // came first). expectInvariants waits for it: "every due timeout is final" holds vacuously
    // while the seeded rows are not due yet, which a loaded box once met (Citus, CI: 75 of 5,090
    // done when the check passed, the counts read mid-drain).
    const { rows } = await this.pool.query<{ at: number }>(
      `SELECT extract(epoch FROM now() + ($1::float8 + $2::float8) * interval '1 millisecond') * 1000 AS at`,
      [opts.dueInMs ?? 0, opts.spreadMs ?? 0],
    );
    this.seededDueBy = Math.max(this.seededDueBy, Number(rows[0]!.at));
    return { from, to };
  }

  /** The latest due instant seed() wrote (epoch ms, PostgreSQL's clock); 0 before any seed. */
  private seededDueBy = 0;

  private spawn(
    role: 'coordinator' | 'worker' | 'run',
    name: string,
    opts: { failpoints?: string; env?: Record<string, string>; concurrency?: number; prefixCmd?: string[]; args?: string[] } = {},
  ): CliProcess {
    const args = [role, '--config', this.configPath, ...(opts.args ?? [])];
    if (opts.concurrency) args.push('--concurrency', String(opts.concurrency));
    const p = spawnCli(name, args, this.env({ TC_FAILPOINTS: opts.failpoints, ...opts.env }));
    this.procs.push(p);
    return p;
  }

  coordinator(name = 'coordinator', opts: Parameters<Scenario['spawn']>[2] = {}): CliProcess {
    return this.spawn('coordinator', name, opts);
  }

  worker(name = 'worker', opts: Parameters<Scenario['spawn']>[2] = {}): CliProcess {
    return this.spawn('worker', name, opts);
  }

  async count(sql: string, params: unknown[] = []): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(sql, params);
    return Number(rows[0]?.n ?? 0);
  }

  /** Waits until every due timeout is final and every scan reduced, then checks I1-I4 and that
   *  the orders closed are exactly the timeouts applied. Returns the figures. */
  async expectInvariants(timeoutMs = 30_000): Promise<Invariants & { applied: number; closed: number; failed: number; cancelled: number }> {
    // First until every seeded row is due (when that is within the time given: rows seeded far
    // ahead are not expected to drain here).
    const { rows: clock } = await this.pool.query<{ now: number }>(`SELECT extract(epoch FROM now()) * 1000 AS now`);
    const untilDue = this.seededDueBy - Number(clock[0]!.now);
    if (untilDue > 0 && untilDue < timeoutMs) await sleep(untilDue + 50);
    const inv = await waitForDrain(this.pool, timeoutMs, this.colocated);
    const applied = await this.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied'`);
    const closed = await this.count(`SELECT count(*) AS n FROM order_transitions WHERE to_status = 'closed'`);
    const failed = await this.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'failed'`);
    const cancelled = await this.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'cancelled'`);
    const figures = { ...inv, applied, closed, failed, cancelled };
    let detail = '';
    if (inv.unreducedScans > 0 || inv.lost > 0) {
      const { rows: scans } = await this.pool.query(
        `SELECT s.id, s.epoch, s.state, s.claimed, s.shard_count,
                (SELECT json_agg(json_build_object('id', sh.id, 'state', sh.state, 'attempts', sh.attempts, 'publish_count', sh.publish_count))
                   FROM timeout_center.shards sh WHERE sh.scan_id = s.id AND sh.state IN ('queued', 'running')) AS open_shards,
                (SELECT epoch FROM timeout_center.coordinator_lease) AS current_epoch
           FROM timeout_center.scans s WHERE s.state <> 'reduced'`,
      );
      detail = `; open scans: ${JSON.stringify(scans)}`;
      // What each process said last: who led, what it waited on (a stalled drain is read from
      // these; CI once met one after a Redis Sentinel failover that local runs never reproduced).
      const tails = this.procs.map((p) => ({
        process: p.name,
        alive: p.alive,
        last: p.lines.slice(-12).map((l) => `${String(l['time'] ?? '')} ${String(l['level'] ?? '')} ${String(l.msg ?? '')}`),
      }));
      detail += `; processes: ${JSON.stringify(tails)}`;
    }
    expect(figures, `invariants of ${this.label}${detail}`).toMatchObject({ lost: 0, doubled: 0, wrong: 0, reduceMismatch: 0, unreducedScans: 0 });
    if (closed !== applied) {
      // What the history says of the orders closed (for the failure message).
      const { rows: results } = await this.pool.query(
        `SELECT result, count(*)::int AS n FROM timeout_center.done_timeouts GROUP BY 1
         UNION ALL SELECT 'live ' || state, count(*)::int FROM timeout_center.timeouts GROUP BY 1`,
      );
      const { rows: shards } = await this.pool.query(
        `SELECT state, count(*)::int AS n, sum(done_count)::int AS done, sum(skipped_count)::int AS skipped, sum(failed_count)::int AS failed,
                sum(retried_count)::int AS retried, count(*) FILTER (WHERE attempts > 1)::int AS rerun FROM timeout_center.shards GROUP BY 1`,
      );
      detail += `; history: ${JSON.stringify(results)}; shards: ${JSON.stringify(shards)}`;
    }
    expect(closed, `every close comes from exactly one applied timeout${detail}`).toBe(applied);
    return figures;
  }

  /** Checks I1-I4 now, without waiting (after a failed scenario, for the report). */
  invariantsNow(): Promise<Invariants> {
    return checkInvariants(this.pool, this.colocated);
  }

  /** Graceful stop of every process still running (SIGTERM; SIGKILL after timeoutMs). */
  async stopAll(timeoutMs = 10_000): Promise<void> {
    await Promise.all(this.procs.filter((p) => p.alive).map((p) => p.stop(timeoutMs)));
  }

  /** Drops the database (when it made one), the Redis keys of its prefix, and the pool. */
  async close(): Promise<void> {
    await this.pool.end().catch(() => {});
    await this.db?.drop().catch(() => {});
    if (!this.redisUrl || !this.redisUrl.startsWith(TEST_REDIS_URL)) return;
    const redis = new Redis(this.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
    redis.on('error', () => {});
    try {
      await redis.connect();
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${this.prefix}:*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) await redis.del(...keys);
      } while (cursor !== '0');
    } catch {
      // best effort
    } finally {
      redis.disconnect();
    }
  }

  elapsedMs(): number {
    return Date.now() - this.started;
  }
}

export const isMsg = (re: RegExp) => (l: LogLine) => re.test(String(l.msg));

/** Log lines of a process whose message matches. */
export function linesMatching(p: CliProcess, re: RegExp): LogLine[] {
  return p.lines.filter((l) => re.test(String(l.msg)));
}

/** VmRSS of a process in MB (undefined once it is gone). */
export function rssMb(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Process state letter from /proc/<pid>/stat (T = stopped). */
export function procState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return undefined;
  }
}

export async function waitUntil(what: string, test: () => Promise<boolean> | boolean, timeoutMs = 30_000, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await test()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One line per scenario with its figures, collected by the reliability page. */
export function report(scenario: string, figures: Record<string, unknown>): void {
  console.log(`[fault-report] ${scenario} ${JSON.stringify(figures)}`);
}

/** Stops every process of the list (and empties it): thawed first if a test froze it, then SIGKILLed. */
export async function stopProcesses(list: CliProcess[]): Promise<void> {
  for (const p of list.splice(0)) {
    if (!p.alive) continue;
    try {
      process.kill(p.pid, 'SIGCONT');
    } catch {
      // gone already
    }
    p.child.kill('SIGKILL');
    await p.exited;
  }
}
