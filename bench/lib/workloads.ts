// The four workloads. Each system gets a fresh database (and its own Redis key prefix) per
// workload; the bench process loads the data and watches the orders table, the system's own
// processes do the work.
import { once } from 'node:events';
import pg from 'pg';
import { sql } from '../../dist/db/queries.js';
import { testKeyPrefix } from '../../test/helpers/services.ts';
import { runCli } from '../../test/helpers/processes.ts';
import { writeConfig } from '../../test/helpers/orders.ts';
import { ORDERS_DDL, UNFINISHED_SQL, correctness, insertOrders, lateness, progress, sleep, type Correctness, type Lateness } from './orders.ts';
import type { BenchServer } from './server.ts';
import { cpuSeconds, deleteRedisPrefix, makeDriver, KIND, type ProcessStats, type Variant } from './systems.ts';
import type { Status } from './status.ts';

export const REDIS_URL = process.env['BENCH_REDIS_URL'] ?? process.env['TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379';

export interface BurstResult {
  variant: string;
  n: number;
  /** seconds from "all due" to "all unpaid closed" */
  seconds: number;
  rate: number;
  lateness: Lateness;
  correctness: Correctness;
  rss: ProcessStats[];
  /** ms the loading ran past the due time (0 = the drain started cleanly at the due time) */
  overrunMs: number;
  timedOut: boolean;
  /** PostgreSQL work per timeout during the drain, from pg_stat_database of the system's own
   *  database (deterministic, unlike timings on a shared box) */
  cost?: DrainCost;
  /** CPU seconds of the PostgreSQL backends serving the system (connected at the end) */
  dbCpuSeconds?: number;
  /** CPU seconds the consumer processes spent from the due instant to the end of the drain
   *  (their start-up left out) */
  consumerCpuSeconds?: number;
  /** With --rounds: the rate of every round; this result is the round with the median rate. */
  roundRates?: number[];
  /** timeout-center: its shards during the drain (how many, how big, where their time went) */
  shards?: ShardProfile;
  /** the drain's statements by total execution time (pg_stat_statements), the bench's own excluded */
  statements?: StatementCost[];
}

export interface ShardProfile {
  count: number;
  meanRows: number;
  /** s from the due instant to the first shard row written by the coordinator (its map) */
  firstCreatedAfterDue: number;
  /** s from the due instant to the first shard's lease (a worker starts it) */
  firstStartedAfterDue: number;
  /** median s from a shard's creation to its lease (queued in Redis, waiting for a free slot) */
  queuedP50: number;
  /** median s from a shard's lease to its commit (lock, claim + handler, finish, commit) */
  runP50: number;
  /** statements (pg_stat_statements calls, BEGIN/COMMIT included) per shard, all processes */
  statementsPerShard: number;
}

export interface StatementCost {
  query: string;
  calls: number;
  rows: number;
  totalMs: number;
  meanMs: number;
}

export interface DrainCost {
  /** WAL bytes written by the instance during the drain (pg_current_wal_lsn delta; the bench owns the instance) */
  walBytes: number;
  /** WAL records and full-page images (pg_stat_wal) */
  walRecords: number;
  walFpi: number;
  /** non-HOT row versions written (inserts + non-HOT updates): each adds an entry to every index
   *  of its table whose predicate it meets */
  nonHotRows: number;
  /** upper bound of index entries written: non-HOT row versions × their table's index count */
  indexEntriesMax: number;
  /** total statement execution time in the system's database (ms, pg_stat_statements) */
  statementMs: number;
  /** statements run (pg_stat_statements calls) */
  statements: number;
  /** shared buffers touched (hit + read) */
  buffers: number;
  /** rows inserted + updated + deleted */
  rowsWritten: number;
  /** rows returned + fetched */
  rowsRead: number;
  /** transactions committed or rolled back */
  transactions: number;
}

interface DbCounters {
  buffers: number;
  rowsWritten: number;
  rowsRead: number;
  transactions: number;
  walLsn: string;
  walRecords: number;
  walFpi: number;
}

async function dbCounters(adminUrl: string, dbName: string): Promise<DbCounters> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const { rows } = await c.query<DbCounters>(
      `SELECT (blks_hit + blks_read)::float8 AS buffers, (tup_inserted + tup_updated + tup_deleted)::float8 AS "rowsWritten",
              (tup_returned + tup_fetched)::float8 AS "rowsRead", (xact_commit + xact_rollback)::float8 AS transactions,
              pg_current_wal_lsn()::text AS "walLsn", w.wal_records::float8 AS "walRecords", w.wal_fpi::float8 AS "walFpi"
         FROM pg_stat_database, pg_stat_wal w WHERE datname = $1`,
      [dbName],
    );
    return rows[0]!;
  } finally {
    await c.end();
  }
}

/** Per table of the system's database: inserts, non-HOT updates, and its index count. */
async function tableWrites(pool: pg.Pool): Promise<Map<string, { nonHot: number; indexes: number }>> {
  const { rows } = await pool.query<{ rel: string; nonhot: number; indexes: number }>(
    `SELECT t.schemaname || '.' || t.relname AS rel, (t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd)::float8 AS nonhot,
            (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)::int AS indexes
       FROM pg_stat_user_tables t`,
  );
  return new Map(rows.map((r) => [r.rel, { nonHot: r.nonhot, indexes: r.indexes }]));
}

/** The bench's own statements carry this comment, so the statement profile leaves them out. */
export const BENCH_TAG = '/* tc-bench */';

async function statementProfile(pool: pg.Pool): Promise<StatementCost[]> {
  const { rows } = await pool.query<StatementCost>(
    `${BENCH_TAG} SELECT regexp_replace(left(query, 400), '\\s+', ' ', 'g') AS query, calls::float8 AS calls, rows::float8 AS rows,
            total_exec_time::float8 AS "totalMs", mean_exec_time::float8 AS "meanMs"
       FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query NOT LIKE '%tc-bench%' AND query NOT LIKE '%pg_stat%'
      ORDER BY total_exec_time DESC`,
  );
  return rows;
}

async function shardProfile(pool: pg.Pool, t0: Date): Promise<Omit<ShardProfile, 'statementsPerShard'> | undefined> {
  const { rows } = await pool.query<Omit<ShardProfile, 'statementsPerShard'>>(
    `${BENCH_TAG} SELECT count(*)::int AS count, coalesce(avg(size), 0)::float8 AS "meanRows",
            extract(epoch FROM min(created_at) - $1)::float8 AS "firstCreatedAfterDue",
            extract(epoch FROM min(started_at) - $1)::float8 AS "firstStartedAfterDue",
            coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)), 0)::float8 AS "queuedP50",
            coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - started_at)), 0)::float8 AS "runP50"
       FROM timeout_center.shards WHERE state = 'done' AND size > 0`,
    [t0],
  );
  return rows[0]!.count > 0 ? rows[0]! : undefined;
}

/** Makes the pool's backends publish their pending statistics now (PostgreSQL 15+). */
async function flushStats(pool: pg.Pool): Promise<void> {
  await Promise.all([1, 2, 3].map(() => pool.query('SELECT pg_stat_force_next_flush()')));
  await sleep(300);
}

export interface SteadyResult {
  variant: string;
  rate: number;
  durationS: number;
  delayS: number;
  arrived: number;
  /** arrivals actually achieved per second */
  achievedRate: number;
  lateness: Lateness;
  correctness: Correctness;
  backlog: { t: number; n: number }[];
  maxBacklog: number;
  rss: ProcessStats[];
  timedOut: boolean;
  /** timeout-center only: where a closed order's lateness went, per stage (seconds, p50 / p99):
   *  due -> its shard written by the plan, written -> leased by a worker, leased -> commit. */
  stages?: StageProfile;
}

export interface StageProfile {
  shards: number;
  rowsPerShard: number;
  planned: { p50: number; p99: number };
  leased: { p50: number; p99: number };
  committed: { p50: number; p99: number };
}

/** The stage profile of a steady run of timeout-center (undefined for other systems). */
async function stageProfile(pool: pg.Pool): Promise<StageProfile | undefined> {
  const { rows } = await pool.query<{
    shards: number;
    rows_per_shard: number | null;
    pl50: number;
    pl99: number;
    le50: number;
    le99: number;
    co50: number;
    co99: number;
  }>(
    `${BENCH_TAG} SELECT count(DISTINCT sh.id)::int AS shards, (count(*)::float8 / nullif(count(DISTINCT sh.id), 0)) AS rows_per_shard,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sh.created_at - t.due_at))::float8 AS pl50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sh.created_at - t.due_at))::float8 AS pl99,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sh.started_at - sh.created_at))::float8 AS le50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sh.started_at - sh.created_at))::float8 AS le99,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(o.xmin) - sh.started_at))::float8 AS co50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(o.xmin) - sh.started_at))::float8 AS co99
       FROM timeout_center.done_timeouts t
       JOIN timeout_center.shards sh ON sh.id = t.shard_id
       JOIN orders o ON o.id = t.biz_id::bigint
      WHERE o.status = 'closed'`,
  );
  const r = rows[0];
  if (!r || r.shards === 0) return undefined;
  return {
    shards: r.shards,
    rowsPerShard: r.rows_per_shard ?? 0,
    planned: { p50: r.pl50, p99: r.pl99 },
    leased: { p50: r.le50, p99: r.le99 },
    committed: { p50: r.co50, p99: r.co99 },
  };
}

interface Env {
  status: Status;
  server: BenchServer;
  keep?: boolean;
  /** timeout-center's Redis instead of REDIS_URL, e.g. { REDIS_CLUSTER } (bench/redis-modes.ts). */
  redisEnv?: Record<string, string>;
}

async function withSystem<T>(
  variant: Variant,
  workload: string,
  env: Env,
  fn: (ctx: { pool: pg.Pool; url: string; dbName: string; driver: ReturnType<typeof makeDriver> }) => Promise<T>,
): Promise<T> {
  const db = await env.server.createDatabase(`bench_${workload}_${variant.id}`);
  const pool = new pg.Pool({ connectionString: db.url, max: 3, application_name: 'tc-bench' });
  pool.on('error', () => {});
  const driver = makeDriver(variant, { databaseUrl: db.url, redisUrl: REDIS_URL, redisEnv: env.redisEnv, redisPrefix: testKeyPrefix('bench'), pool });
  try {
    await pool.query(ORDERS_DDL);
    env.status.set('preparing schema');
    await driver.prepare();
    return await fn({ pool, url: db.url, dbName: db.name, driver });
  } finally {
    await driver.stop().catch(() => {});
    await driver.close().catch(() => {});
    await pool.end().catch(() => {});
    if (!env.keep) await db.drop().catch(() => {});
  }
}

/** Waits until the due timeouts are final too (timeout-center, pure SQL), briefly. */
async function settleTimeouts(pool: pg.Pool, table: 'ours' | 'minimal', ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const { rows } = await pool.query<{ n: number }>(`${BENCH_TAG} ${UNFINISHED_SQL[table]}`);
    if (rows[0]!.n === 0) return;
    await sleep(200);
  }
}

// 1. Burst drain ----------------------------------------------------------------------------

export async function burst(variant: Variant, n: number, maxSeconds: number, env: Env, leadMs = 2500): Promise<BurstResult> {
  return withSystem(variant, 'burst', env, async ({ pool, dbName, driver }) => {
    const unpaid = n - Math.floor(n / 10);
    // Due far enough ahead that loading and process start finish first.
    const aheadMs = leadMs + (n * (driver.scheduleCostUs + 10)) / 1000;
    const t0 = new Date(Date.now() + aheadMs);
    const chunk = 50_000;
    for (let a = 1; a <= n; a += chunk) {
      const b = Math.min(n, a + chunk - 1);
      env.status.set(`loading ${b.toLocaleString('en')}/${n.toLocaleString('en')}`);
      await insertOrders(pool, a, b, t0);
      await driver.schedule(a, b, t0);
    }
    // Every system starts from the same state: statistics and visibility map current (as
    // autovacuum would leave a table filled over minutes), and no checkpoint due mid-drain (the
    // first write of each page after a checkpoint logs the whole page).
    await pool.query('VACUUM ANALYZE');
    await pool.query('CHECKPOINT');
    // Loading connections publish their statistics before the drain's counters are read.
    await driver.endLoading();
    await flushStats(pool);
    const before = await dbCounters(env.server.adminUrl, dbName);
    const writesBefore = await tableWrites(pool);
    if (env.server.hasStatStatements) await pool.query(`${BENCH_TAG} SELECT pg_stat_statements_reset()`);
    env.status.set('starting processes');
    await driver.start();
    const overrunMs = Math.max(0, Date.now() - t0.getTime());
    while (Date.now() < t0.getTime()) {
      env.status.set(`due in ${((t0.getTime() - Date.now()) / 1000).toFixed(1)} s`);
      await sleep(Math.min(200, t0.getTime() - Date.now()));
    }
    const consumerCpu = () => driver.processes.reduce((sum, p) => sum + cpuSeconds(p.pid), 0);
    const consumerCpuAtDue = consumerCpu();
    const pollMs = n >= 50_000 ? 1000 : 250; // the end time comes from the last close's commit timestamp, not from this poll
    let timedOut = false;
    for (;;) {
      const p = await progress(pool);
      const elapsed = (Date.now() - t0.getTime()) / 1000;
      env.status.set(
        `closed ${p.closed.toLocaleString('en')}/${unpaid.toLocaleString('en')}  ${Math.round(p.closed / Math.max(elapsed, 0.001)).toLocaleString('en')}/s  ${elapsed.toFixed(1)} s`,
      );
      if (p.closed >= unpaid) break;
      if (elapsed > maxSeconds) {
        timedOut = true;
        break;
      }
      await sleep(pollMs);
    }
    if (driver.timeoutsTable && !timedOut) await settleTimeouts(pool, driver.timeoutsTable, 15_000);
    const backends = await pool.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name <> 'tc-bench'",
    );
    const dbCpuSeconds = backends.rows.reduce((sum, r) => sum + cpuSeconds(r.pid), 0);
    const consumerCpuSeconds = consumerCpu() - consumerCpuAtDue;
    const rss = await driver.stop();
    await flushStats(pool);
    const after = await dbCounters(env.server.adminUrl, dbName);
    const writesAfter = await tableWrites(pool);
    const statements = env.server.hasStatStatements ? await statementProfile(pool) : [];
    const shards = driver.timeoutsTable === 'ours' && variant.system === 'timeout-center' ? await shardProfile(pool, t0) : undefined;
    const lat = await lateness(pool);
    // When loading or start-up overran the due time, the drain is timed from when the consumers were up.
    const seconds = lat.lastCloseEpoch === null ? maxSeconds : lat.lastCloseEpoch - (t0.getTime() + overrunMs) / 1000;
    const done = timedOut ? Math.round((lat.count / unpaid) * n) : n;
    const corr = timedOut ? { ...(await correctness(pool, undefined)), ok: false, problems: ['timed out'] } : await correctness(pool, driver.timeoutsTable);
    const per = (k: Exclude<keyof DbCounters, 'walLsn'>) => (after[k] - before[k]) / done;
    const wal = await pool.query<{ bytes: number }>(`${BENCH_TAG} SELECT pg_wal_lsn_diff($1, $2)::float8 AS bytes`, [after.walLsn, before.walLsn]);
    let nonHot = 0;
    let indexEntries = 0;
    for (const [rel, a] of writesAfter) {
      const d = a.nonHot - (writesBefore.get(rel)?.nonHot ?? 0);
      nonHot += d;
      indexEntries += d * a.indexes;
    }
    const cost: DrainCost = {
      walBytes: wal.rows[0]!.bytes / done,
      walRecords: per('walRecords'),
      walFpi: per('walFpi'),
      nonHotRows: nonHot / done,
      indexEntriesMax: indexEntries / done,
      statementMs: statements.reduce((t, x) => t + x.totalMs, 0) / done,
      statements: statements.reduce((t, x) => t + x.calls, 0) / done,
      buffers: per('buffers'),
      rowsWritten: per('rowsWritten'),
      rowsRead: per('rowsRead'),
      transactions: per('transactions'),
    };
    const shardResult = shards ? { ...shards, statementsPerShard: statements.reduce((t, x) => t + x.calls, 0) / shards.count } : undefined;
    return {
      variant: variant.id,
      n,
      seconds,
      rate: done / seconds,
      lateness: lat,
      correctness: corr,
      rss,
      overrunMs,
      timedOut,
      cost,
      dbCpuSeconds,
      consumerCpuSeconds,
      ...(shardResult ? { shards: shardResult } : {}),
      statements: statements.slice(0, 10),
    };
  });
}

// 2. Steady arrivals -------------------------------------------------------------------------

export async function steady(variant: Variant, rate: number, durationS: number, delayS: number, env: Env): Promise<SteadyResult> {
  return withSystem(variant, 'steady', env, async ({ pool, url, driver }) => {
    env.status.set('starting processes');
    await driver.start();
    if (process.env['BENCH_DIAG'] && env.server.hasStatStatements) await pool.query(`${BENCH_TAG} SELECT pg_stat_statements_reset()`);
    const start = Date.now();
    let next = 1;
    const backlog: { t: number; n: number }[] = [];
    let sampling = true;
    const sampler = (async () => {
      const samplePool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        while (sampling) {
          const t = (Date.now() - start) / 1000;
          const p = await progress(samplePool);
          backlog.push({ t: Math.round(t * 10) / 10, n: p.backlog });
          env.status.set(
            `${t < durationS ? 'arriving' : 'draining'}: ${(next - 1).toLocaleString('en')} scheduled, ${p.closed.toLocaleString('en')} closed, backlog ${p.backlog}  ${t.toFixed(0)} s`,
          );
          await sleep(1000 - ((Date.now() - start) % 1000));
        }
      } finally {
        await samplePool.end();
      }
    })();
    // Arrivals every 100 ms, catching up if a batch took longer.
    while (Date.now() - start < durationS * 1000) {
      const target = Math.floor((rate * (Date.now() - start)) / 1000);
      if (target >= next) {
        const due = new Date(Date.now() + delayS * 1000);
        await insertOrders(pool, next, target, due);
        await driver.schedule(next, target, due);
        next = target + 1;
      }
      await sleep(100 - ((Date.now() - start) % 100));
    }
    const arrived = next - 1;
    const actualS = (Date.now() - start) / 1000;
    const unpaid = arrived - Math.floor(arrived / 10);
    const deadline = Date.now() + (delayS + 60) * 1000;
    let timedOut = false;
    for (;;) {
      const p = await progress(pool);
      if (p.closed >= unpaid) break;
      if (Date.now() > deadline) {
        timedOut = true;
        break;
      }
      await sleep(250);
    }
    await sleep(1000); // one more backlog sample at zero
    sampling = false;
    await sampler;
    if (driver.timeoutsTable && !timedOut) await settleTimeouts(pool, driver.timeoutsTable, 15_000);
    const rss = await driver.stop();
    const lat = await lateness(pool);
    const stages = variant.system === 'timeout-center' ? await stageProfile(pool) : undefined;
    if (process.env['BENCH_DIAG']) {
      await flushStats(pool);
      for (const r of (await statementProfile(pool)).slice(0, 14))
        process.stderr.write(`DIAG ${r.calls} calls mean ${r.meanMs.toFixed(2)} ms total ${r.totalMs.toFixed(0)} ${r.query.slice(0, 90)}\n`);
    }
    const corr = timedOut ? { ...(await correctness(pool, undefined)), ok: false, problems: ['timed out'] } : await correctness(pool, driver.timeoutsTable);
    return {
      ...(stages ? { stages } : {}),
      variant: variant.id,
      rate,
      durationS,
      delayS,
      arrived,
      achievedRate: arrived / actualS,
      lateness: lat,
      correctness: corr,
      backlog,
      maxBacklog: Math.max(0, ...backlog.map((b) => b.n)),
      rss,
      timedOut,
    };
  });
}

// 3. Idle cost and pending scale ---------------------------------------------------------------

export interface TickCost {
  ticks: number;
  msMedian: number;
  msMean: number;
  statementsPerTick: number;
  /** rows read from timeout_center tables (seq_tup_read + idx_tup_fetch) per tick */
  rowsPerTick: number;
  /** shared buffers touched (hit + read) in timeout_center tables and indexes per tick */
  buffersPerTick: number;
}

export interface PendingResult {
  pending: number;
  insertSeconds: number;
  empty: TickCost;
  loaded: TickCost;
  ratio: number;
  tableBytes: number;
  heapBytes: number;
  indexBytes: number;
  bytesPerTimeout: number;
  explain: string;
}

async function tableCounters(url: string): Promise<{ rows: number; buffers: number }> {
  // A short-lived connection: its own activity is on catalog views only.
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query<{ rows: number; buffers: number }>(`
      SELECT (SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_user_tables WHERE schemaname = 'timeout_center')::float8 AS rows,
             (SELECT coalesce(sum(coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)), 0)
                FROM pg_statio_user_tables WHERE schemaname = 'timeout_center')::float8 AS buffers`);
    return rows[0]!;
  } finally {
    await c.end();
  }
}

/** Runs `ticks` coordinator ticks one second apart (the idle cadence: the cron safety net) in
 *  this process, counting statements on the pool and reading the table counters around them. */
async function measureTicks(url: string, configPath: string, ticks: number, spacingMs: number, env: Env, label: string): Promise<TickCost> {
  const dist = new URL('../../dist/', import.meta.url);
  const { loadConfig } = await import(new URL('config.js', dist).href);
  const { Coordinator } = await import(new URL('coordinator/coordinator.js', dist).href);
  const { Leadership } = await import(new URL('coordinator/leadership.js', dist).href);
  const { RedisStreamsChannel } = await import(new URL('transport/redis-streams.js', dist).href);
  const { Metrics } = await import(new URL('observability/metrics.js', dist).href);
  const { createLogger } = await import(new URL('observability/logger.js', dist).href);
  const config = loadConfig({ path: configPath, env: { DATABASE_URL: url, REDIS_URL } });
  const logger = createLogger('warn');
  const channel = new RedisStreamsChannel({ connection: config.redisConnection, keyPrefix: config.redisKeyPrefix, logger });
  await channel.init(Object.keys(config.kinds));
  const leaderPool = new pg.Pool({ connectionString: url, max: 1 });
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let statements = 0;
  pool.on('connect', (client) => {
    const original = client.query.bind(client) as (...a: unknown[]) => unknown;
    (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...args: unknown[]) => {
      statements += 1;
      return original(...args);
    };
  });
  const leadership = new Leadership({
    redis: channel.redis,
    pool: leaderPool,
    lockKey: `${config.redisKeyPrefix}:coordinator-lock`,
    ttlMs: 10_000,
    coordinatorId: 'bench',
    logger,
  });
  const coordinator = new Coordinator({ config, pool, channel, leadership, metrics: new Metrics('coordinator'), logger, coordinatorId: 'bench' });
  const elected = once(leadership, 'elected');
  leadership.start();
  await elected;
  try {
    // Warm up (first tick reaps and checks lag; caches, plans), then measure on fresh counters.
    for (let i = 0; i < 2; i++) await coordinator.tick();
    await pool.end();
    await sleep(500);
    const measured = new pg.Pool({ connectionString: url, max: 4 });
    measured.on('connect', (client) => {
      const original = client.query.bind(client) as (...a: unknown[]) => unknown;
      (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...args: unknown[]) => {
        statements += 1;
        return original(...args);
      };
    });
    const c2 = new Coordinator({ config, pool: measured, channel, leadership, metrics: new Metrics('coordinator'), logger, coordinatorId: 'bench' });
    const before = await tableCounters(url);
    statements = 0;
    const ms: number[] = [];
    for (let i = 0; i < ticks; i++) {
      env.status.set(`${label}: tick ${i + 1}/${ticks}`);
      const t = performance.now();
      await c2.tick();
      ms.push(performance.now() - t);
      await sleep(spacingMs);
    }
    const stmts = statements;
    await measured.end(); // backends exit: their table counters are flushed
    await sleep(700);
    const after = await tableCounters(url);
    ms.sort((a, b) => a - b);
    return {
      ticks,
      msMedian: ms[Math.floor(ms.length / 2)]!,
      msMean: ms.reduce((a, b) => a + b, 0) / ms.length,
      statementsPerTick: stmts / ticks,
      rowsPerTick: (after.rows - before.rows) / ticks,
      buffersPerTick: (after.buffers - before.buffers) / ticks,
    };
  } finally {
    await leadership.stop().catch(() => {});
    await channel.close().catch(() => {});
    await leaderPool.end().catch(() => {});
  }
}

export async function pendingScale(pending: number, ticks: number, spacingMs: number, env: Env): Promise<PendingResult> {
  const db = await env.server.createDatabase('bench_pending');
  const prefix = testKeyPrefix('bench');
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  try {
    const configPath = writeConfig({
      redisKeyPrefix: prefix,
      kinds: { [KIND]: { handler: { type: 'sql', sql: "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND status = 'unpaid' RETURNING id" } } },
    });
    env.status.set('migrating');
    const r = await runCli(['migrate', '-c', configPath], { DATABASE_URL: db.url, REDIS_URL }, 60_000);
    if (r.code !== 0) throw new Error(`migrate failed: ${r.stderr}`);
    await pool.query(ORDERS_DDL);
    const empty = await measureTicks(db.url, configPath, ticks, spacingMs, env, 'empty table');
    const t = Date.now();
    const chunk = 1_000_000;
    for (let a = 1; a <= pending; a += chunk) {
      const b = Math.min(pending, a + chunk - 1);
      env.status.set(`inserting pending timeouts ${b.toLocaleString('en')}/${pending.toLocaleString('en')}`);
      await pool.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
         SELECT $3, i::text, now() + interval '1 day' + i * interval '10 ms' FROM generate_series($1::bigint, $2::bigint) i`,
        [a, b, KIND],
      );
    }
    const insertSeconds = (Date.now() - t) / 1000;
    env.status.set('VACUUM ANALYZE');
    await pool.query('VACUUM ANALYZE timeout_center.timeouts');
    const loaded = await measureTicks(db.url, configPath, ticks, spacingMs, env, `${pending.toLocaleString('en')} pending`);
    const { rows } = await pool.query<{ total: number; heap: number; idx: number }>(
      `SELECT pg_total_relation_size('timeout_center.timeouts')::float8 AS total,
              pg_table_size('timeout_center.timeouts')::float8 AS heap,
              pg_indexes_size('timeout_center.timeouts')::float8 AS idx`,
    );
    const sizes = rows[0]!;
    const nextDue = sql('coordinator/next_due', { kinds: [KIND], floors: '{}', marks: '[]', shardsFrom: 0, scansFrom: 0, server: '', lateFrom: '' });
    const ex = await pool.query({ ...nextDue, text: `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${nextDue.text}` });
    return {
      pending,
      insertSeconds,
      empty,
      loaded,
      ratio: loaded.msMedian / empty.msMedian,
      tableBytes: sizes.total,
      heapBytes: sizes.heap,
      indexBytes: sizes.idx,
      bytesPerTimeout: sizes.total / pending,
      explain: ex.rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n'),
    };
  } finally {
    await pool.end().catch(() => {});
    await deleteRedisPrefix(REDIS_URL, prefix).catch(() => {});
    if (!env.keep) await db.drop().catch(() => {});
  }
}
