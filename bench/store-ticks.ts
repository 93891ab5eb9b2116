// npm run bench:store-ticks [-- options]: the tick cost per store (issue 27) from 1 to 8 stores.
// For each N, N fresh store databases and a center database on the bench's own PostgreSQL (one
// instance, track_commit_timestamp and pg_stat_statements on), one kind `store: beside` routed
// `modulo` over them, `timeout-center migrate` through the CLI, then ONE coordinator process and
// ONE worker process. Each store gets a light steady load (--rate timeouts due per second, spread
// evenly, written with their orders into the store's database every 100 ms). Measured:
//   idle      the coordinator's CPU with N stores led and nothing due (--idle s)
//   window    after --warmup s of load, --window s: the coordinator's CPU (utime + stime from
//             /proc/<pid>/stat at the window's start and end) per store per second; per store,
//             its ticks (calls of next_due.sql, one per tick, from pg_stat_statements) and the
//             PostgreSQL time of every statement the coordinator ran there, the scans it wrote,
//             and the lateness of the timeouts due in the window (commit of the close -
//             due_at, pg_xact_commit_timestamp, p50/p99).
// The coordinator and the worker connect as roles of their own (tc_coord, tc_worker), so
// pg_stat_statements separates their statements in each database. The center's own coordinator
// (always there) is counted in the process CPU, so CPU / N includes 1/N of its idle cost.
// Rounds interleave the sizes (1, 2, 4, 8, then 8, 4, 2, 1, ...); the summary takes medians.
//
//   --stores <list>    store counts (default 1,2,4,8)
//   --rounds <r>       rounds over the list, alternating order (default 2)
//   --rate <n>         timeouts due per second per store (default 50)
//   --idle <s>         idle window before the load (default 5)
//   --warmup <s>       load before the window (default 5)
//   --window <s>       measured window (default 15)
//   --out <file>       raw JSON (default docs/bench/store-ticks.json; "-" for none)
//   --help             this text
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import pg from 'pg';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { Status } from './lib/status.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../test/helpers/orders.ts';
import { killAll, runCli, spawnCli, type CliProcess } from '../test/helpers/processes.ts';
import { TEST_REDIS_URL, uniqueName } from '../test/helpers/services.ts';

const { values: args } = parseArgs({
  options: {
    stores: { type: 'string' },
    rounds: { type: 'string' },
    rate: { type: 'string' },
    idle: { type: 'string' },
    warmup: { type: 'string' },
    window: { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const opts = positiveCounts('bench:store-ticks', args, { rounds: 2, rate: 50, idle: 5, warmup: 5, window: 15 });
const SIZES = (args.stores ?? '1,2,4,8').split(',').map((s) => Number(s.trim()));
if (SIZES.some((n) => !Number.isInteger(n) || n < 1 || n > 32))
  failUsage('bench:store-ticks', `--stores must list store counts from 1 to 32, got ${args.stores}`);
const OUT = args.out ?? 'docs/bench/store-ticks.json';
const KIND = 'order.unpaid';
const CLK_TCK = 100; // getconf CLK_TCK on Linux x86-64 and arm64
const FEED_EVERY_MS = 100;
const DUE_AHEAD_MS = 1000;
const exec = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const round = (x: number, d = 2) => Number(x.toFixed(d));

/** utime + stime of a process, in ms. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state): utime is field 14, stime field 15.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}

/** The process's established TCP connections to a port (ss -tnp). */
async function connectionsTo(pid: number, port: number): Promise<number> {
  const { stdout } = await exec('ss', ['-tnpH', 'state', 'established', `( dport = :${port} )`]).catch(() => ({ stdout: '' }));
  return stdout.split('\n').filter((l) => l.includes(`pid=${pid},`)).length;
}

function asRole(url: string, role: string): string {
  const u = new URL(url);
  u.username = role;
  return u.toString();
}

interface StoreFigures {
  store: string;
  ticks: number;
  ticksPerS: number;
  /** PostgreSQL execution time of every coordinator statement in this store's database */
  pgMsPerS: number;
  coordinatorCalls: number;
  scans: number;
  scansPerS: number;
  due: number;
  closed: number;
  latenessP50Ms: number;
  latenessP99Ms: number;
  latenessMaxMs: number;
  /** due_at -> its shard written by the plan (the coordinator's part of the lateness) */
  mappedP50Ms: number;
  mappedP99Ms: number;
}

interface Run {
  round: number;
  stores: number;
  windowS: number;
  idle: { seconds: number; cpuMs: number; cpuMsPerS: number; cpuMsPerStorePerS: number };
  coordinatorCpuMs: number;
  coordinatorCpuMsPerS: number;
  coordinatorCpuMsPerStorePerS: number;
  /** process CPU / every tick it ran (the stores' and the center's) */
  cpuMsPerTick: number;
  workerCpuMsPerS: number;
  coordinatorConnections: { redis: number; postgres: number };
  center: { ticksPerS: number; pgMsPerS: number };
  perStore: StoreFigures[];
  /** medians over the stores */
  ticksPerStorePerS: number;
  pgMsPerStorePerS: number;
  scansPerStorePerS: number;
  latenessP50Ms: number;
  latenessP99Ms: number;
  latenessMaxMs: number;
  mappedP50Ms: number;
  mappedP99Ms: number;
  fed: number;
  errors: string[];
}

async function measure(server: BenchServer, n: number, roundNo: number, status: Status): Promise<Run> {
  const port = Number(new URL(server.adminUrl).port);
  const center = await server.createDatabase(`ticks_c${n}`);
  const stores: { name: string; db: Awaited<ReturnType<BenchServer['createDatabase']>>; pool: pg.Pool }[] = [];
  const procs: CliProcess[] = [];
  const prefix = uniqueName(`ticks${n}`);
  let feeding = false;
  let feeder: Promise<void> | undefined;
  const errors: string[] = [];
  try {
    for (let i = 0; i < n; i += 1) {
      const db = await server.createDatabase(`ticks_s${n}_${i}`);
      const pool = new pg.Pool({ connectionString: db.url, max: 2 });
      pool.on('error', () => {});
      await createOrdersSchema(pool);
      stores.push({ name: `s${i}`, db, pool });
    }
    const config = (role: string) =>
      writeConfig({
        redisKeyPrefix: prefix,
        kinds: {
          [KIND]: { store: 'beside', handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: stores.map((s) => s.name) } } },
        },
        businessDatabases: Object.fromEntries(stores.map((s) => [s.name, { url: asRole(s.db.url, role) }])),
        alerts: { lagSlaMs: 60_000 },
      });
    const coordConfig = config('tc_coord');
    const workerConfig = config('tc_worker');
    const migrated = await runCli(['migrate', '--config', coordConfig], { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL }, 120_000);
    if (migrated.code !== 0) throw new Error(`migrate failed: ${migrated.stderr}`);

    status.step(`round ${roundNo} · ${n} store${n > 1 ? 's' : ''}`);
    status.set('starting the coordinator and the worker');
    const coordinator = spawnCli(`coordinator (${n})`, ['coordinator', '--config', coordConfig], {
      DATABASE_URL: asRole(center.url, 'tc_coord'),
      REDIS_URL: TEST_REDIS_URL,
      LOG_LEVEL: 'info',
    });
    procs.push(coordinator);
    const worker = spawnCli(`worker (${n})`, ['worker', '--config', workerConfig], {
      DATABASE_URL: asRole(center.url, 'tc_worker'),
      REDIS_URL: TEST_REDIS_URL,
      LOG_LEVEL: 'info',
    });
    procs.push(worker);
    await worker.waitForMsg('worker started', 30_000);
    await coordinator.waitFor(() => coordinator.lines.filter((l) => l.msg === 'became leader').length >= n + 1, 30_000, `${n + 1} leaderships`);
    await sleep(3000); // first ticks, prepare, shared controls

    status.set(`idle ${opts.idle} s`);
    const idle0 = { cpu: cpuMs(coordinator.pid), at: performance.now() };
    await sleep(opts.idle * 1000);
    const idleCpu = cpuMs(coordinator.pid) - idle0.cpu;
    const idleS = (performance.now() - idle0.at) / 1000;

    // The load: every 100 ms, rate/10 orders with their timeouts in each store, due 1 s later,
    // spread evenly over the next 100 ms (ids k * n + i route to store i).
    const perFeed = Math.max(1, Math.round((opts.rate * FEED_EVERY_MS) / 1000));
    const next = stores.map(() => 0);
    let fed = 0;
    feeding = true;
    feeder = (async () => {
      const start = performance.now();
      for (let tick = 0; feeding; tick += 1) {
        await Promise.all(
          stores.map(async (s, i) => {
            const from = next[i]!;
            next[i] = from + perFeed;
            await s.pool
              .query(
                `WITH o AS (INSERT INTO orders (id, status) SELECT (($1::bigint + g) * $2::bigint + $3::bigint), 'unpaid' FROM generate_series(0, $4::int - 1) g RETURNING id)
                 INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
                 SELECT $5, id::text, now() + $6 * interval '1 millisecond' + ((id - $3) / $2 - $1) * ($7::float8 * interval '1 millisecond') FROM o`,
                [from, n, i, perFeed, KIND, DUE_AHEAD_MS, FEED_EVERY_MS / perFeed],
              )
              .then(
                () => (fed += perFeed),
                (err: Error) => errors.push(`feed ${s.name}: ${err.message}`),
              );
          }),
        );
        await sleep(start + (tick + 1) * FEED_EVERY_MS - performance.now());
      }
    })();
    status.set(`load ${opts.rate}/s per store, warm-up ${opts.warmup} s`);
    await sleep((opts.warmup * 1000 + DUE_AHEAD_MS) as number);

    // The window.
    const admin = new pg.Client({ connectionString: center.url });
    await admin.connect();
    let window: { t0: Date; t1: Date; cpu: number; workerCpu: number; wallS: number };
    let statements: { dbname: string; query: string; calls: number; ms: number }[];
    let connections: { redis: number; postgres: number };
    try {
      await admin.query('SELECT pg_stat_statements_reset()');
      const t0 = (await admin.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t;
      const c0 = cpuMs(coordinator.pid);
      const w0 = cpuMs(worker.pid);
      const at0 = performance.now();
      status.set(`window ${opts.window} s`);
      await sleep(opts.window * 1000);
      const c1 = cpuMs(coordinator.pid);
      const w1 = cpuMs(worker.pid);
      const wallS = (performance.now() - at0) / 1000;
      const t1 = (await admin.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t;
      ({ rows: statements } = await admin.query(
        `SELECT d.datname AS dbname, s.query, s.calls::float8 AS calls, s.total_exec_time::float8 AS ms
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid
          WHERE r.rolname = 'tc_coord'`,
      ));
      connections = {
        redis: await connectionsTo(coordinator.pid, Number(new URL(TEST_REDIS_URL).port || 6379)),
        postgres: await connectionsTo(coordinator.pid, port),
      };
      window = { t0, t1, cpu: c1 - c0, workerCpu: w1 - w0, wallS };
    } finally {
      await admin.end();
    }
    feeding = false;
    await feeder;
    status.set('waiting for the window’s timeouts to close');
    await sleep(DUE_AHEAD_MS + 3000);
    const isTick = (q: string) => q.includes('AS latest_due');
    const statsOf = (db: string) => {
      const mine = statements.filter((s) => s.dbname === db);
      return {
        ticks: mine.filter((s) => isTick(s.query)).reduce((a, s) => a + s.calls, 0),
        calls: mine.reduce((a, s) => a + s.calls, 0),
        ms: mine.reduce((a, s) => a + s.ms, 0),
      };
    };
    const s = window.wallS;
    const perStore: StoreFigures[] = [];
    for (const st of stores) {
      const pgStats = statsOf(st.db.name);
      const { rows: scans } = await st.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM timeout_center.scans WHERE started_at >= $1 AND started_at < $2',
        [window.t0, window.t1],
      );
      const { rows: late } = await st.pool.query<{
        due: number;
        closed: number;
        p50: number | null;
        p99: number | null;
        max: number | null;
        m50: number | null;
        m99: number | null;
      }>(
        `WITH due AS (SELECT id FROM timeout_center.all_timeouts WHERE kind = $3 AND due_at >= $1 AND due_at < $2),
              l AS (SELECT extract(epoch FROM pg_xact_commit_timestamp(d.xmin) - d.due_at) * 1000 AS ms
                      FROM timeout_center.done_timeouts d WHERE d.kind = $3 AND d.due_at >= $1 AND d.due_at < $2),
              m AS (SELECT extract(epoch FROM sh.created_at - d.due_at) * 1000 AS ms
                      FROM timeout_center.done_timeouts d JOIN timeout_center.shards sh ON sh.id = d.shard_id
                     WHERE d.kind = $3 AND d.due_at >= $1 AND d.due_at < $2)
         SELECT (SELECT count(*) FROM due)::int AS due, (SELECT count(*) FROM l)::int AS closed,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::float8 AS p50,
                percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::float8 AS p99, max(ms)::float8 AS max,
                (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM m)::float8 AS m50,
                (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FROM m)::float8 AS m99 FROM l`,
        [window.t0, window.t1, KIND],
      );
      const l = late[0]!;
      if (l.closed < l.due) errors.push(`${st.name}: ${l.due - l.closed} of ${l.due} due in the window not closed 4 s after it`);
      perStore.push({
        store: st.name,
        ticks: pgStats.ticks,
        ticksPerS: round(pgStats.ticks / s, 1),
        pgMsPerS: round(pgStats.ms / s, 2),
        coordinatorCalls: pgStats.calls,
        scans: scans[0]!.n,
        scansPerS: round(scans[0]!.n / s, 1),
        due: l.due,
        closed: l.closed,
        latenessP50Ms: round(l.p50 ?? NaN, 1),
        latenessP99Ms: round(l.p99 ?? NaN, 1),
        latenessMaxMs: round(l.max ?? NaN, 1),
        mappedP50Ms: round(l.m50 ?? NaN, 1),
        mappedP99Ms: round(l.m99 ?? NaN, 1),
      });
    }
    const centerStats = statsOf(center.name);
    const run: Run = {
      round: roundNo,
      stores: n,
      windowS: round(s, 2),
      idle: { seconds: round(idleS, 2), cpuMs: idleCpu, cpuMsPerS: round(idleCpu / idleS), cpuMsPerStorePerS: round(idleCpu / idleS / n) },
      coordinatorCpuMs: window.cpu,
      coordinatorCpuMsPerS: round(window.cpu / s),
      coordinatorCpuMsPerStorePerS: round(window.cpu / s / n),
      cpuMsPerTick: round(window.cpu / (perStore.reduce((a, p) => a + p.ticks, 0) + centerStats.ticks), 2),
      workerCpuMsPerS: round(window.workerCpu / s),
      coordinatorConnections: connections,
      center: { ticksPerS: round(centerStats.ticks / s, 1), pgMsPerS: round(centerStats.ms / s, 2) },
      perStore,
      ticksPerStorePerS: round(median(perStore.map((p) => p.ticksPerS)), 1),
      pgMsPerStorePerS: round(median(perStore.map((p) => p.pgMsPerS)), 2),
      scansPerStorePerS: round(median(perStore.map((p) => p.scansPerS)), 1),
      latenessP50Ms: round(median(perStore.map((p) => p.latenessP50Ms)), 1),
      latenessP99Ms: round(Math.max(...perStore.map((p) => p.latenessP99Ms)), 1),
      latenessMaxMs: round(Math.max(...perStore.map((p) => p.latenessMaxMs)), 1),
      mappedP50Ms: round(median(perStore.map((p) => p.mappedP50Ms)), 1),
      mappedP99Ms: round(Math.max(...perStore.map((p) => p.mappedP99Ms)), 1),
      fed,
      errors,
    };
    status.log(
      `round ${roundNo}, ${n} store${n > 1 ? 's' : ''}: coordinator ${run.coordinatorCpuMsPerStorePerS} ms CPU/store/s (idle ${run.idle.cpuMsPerStorePerS}), ` +
        `${run.ticksPerStorePerS} ticks/store/s, ${run.pgMsPerStorePerS} ms PG/store/s, ${run.scansPerStorePerS} scans/store/s, ` +
        `lateness p50 ${run.latenessP50Ms} ms p99 ${run.latenessP99Ms} ms (mapped p50 ${run.mappedP50Ms} p99 ${run.mappedP99Ms}), ${run.cpuMsPerTick} ms CPU/tick; redis connections ${connections.redis}, PG ${connections.postgres}` +
        (errors.length ? `; ${errors.join('; ')}` : ''),
    );
    return run;
  } finally {
    feeding = false;
    await feeder?.catch(() => {});
    await Promise.all(procs.map((p) => p.stop(15_000).catch(() => {})));
    await Promise.all(stores.map((s) => s.pool.end().catch(() => {})));
    for (const st of stores) await st.db.drop().catch((err: Error) => errors.push(`drop ${st.name}: ${err.message}`));
    await center.drop().catch(() => {});
    await dropKeys(prefix);
  }
}

/** Removes the run's keys from the shared Redis. */
async function dropKeys(prefix: string): Promise<void> {
  const redis = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 2 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [nextCursor, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = nextCursor;
      if (keys.length) await redis.del(...keys);
    } while (cursor !== '0');
  } catch {
    // best effort: the keys carry a unique prefix
  } finally {
    redis.disconnect();
  }
}

const status = new Status();
const server = await startBenchServer({ walWarmupBytes: 0 });
const runs: Run[] = [];
try {
  if (!server.hasStatStatements) throw new Error('bench:store-ticks needs pg_stat_statements (the bench server preloads it)');
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  for (const role of ['tc_coord', 'tc_worker']) {
    await admin.query(`DO $$ BEGIN CREATE ROLE ${role} LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  }
  await admin.end();
  for (let r = 1; r <= opts.rounds; r += 1) {
    const order = r % 2 === 1 ? SIZES : [...SIZES].reverse();
    for (const n of order) runs.push(await measure(server, n, r, status));
  }
} finally {
  await killAll();
  await server.stop();
}

const summary = SIZES.map((n) => {
  const mine = runs.filter((r) => r.stores === n);
  const m = (f: (r: Run) => number) => round(median(mine.map(f)), 2);
  return {
    stores: n,
    runs: mine.length,
    cpuMsPerStorePerS: m((r) => r.coordinatorCpuMsPerStorePerS),
    cpuMsPerS: m((r) => r.coordinatorCpuMsPerS),
    idleCpuMsPerStorePerS: m((r) => r.idle.cpuMsPerStorePerS),
    ticksPerStorePerS: m((r) => r.ticksPerStorePerS),
    pgMsPerStorePerS: m((r) => r.pgMsPerStorePerS),
    scansPerStorePerS: m((r) => r.scansPerStorePerS),
    latenessP50Ms: m((r) => r.latenessP50Ms),
    latenessP99Ms: m((r) => r.latenessP99Ms),
    mappedP50Ms: m((r) => r.mappedP50Ms),
    mappedP99Ms: m((r) => r.mappedP99Ms),
    cpuMsPerTick: m((r) => r.cpuMsPerTick),
    redisConnections: m((r) => r.coordinatorConnections.redis),
    postgresConnections: m((r) => r.coordinatorConnections.postgres),
  };
});
const first = summary[0]!;
const last = summary[summary.length - 1]!;
const ratio = round(last.cpuMsPerStorePerS / first.cpuMsPerStorePerS, 2);
// Marginal cost of a store: least-squares slope of the process's CPU/s over N (the center's own
// coordinator is the intercept).
const xs = runs.map((r) => r.stores);
const ys = runs.map((r) => r.coordinatorCpuMsPerS);
const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
const my = ys.reduce((a, b) => a + b, 0) / ys.length;
const sxx = xs.reduce((a, x) => a + (x - mx) ** 2, 0);
const slope = sxx ? xs.reduce((a, x, i) => a + (x - mx) * (ys[i]! - my), 0) / sxx : NaN;
const fit = { msPerStorePerS: round(slope), interceptMsPerS: round(my - slope * mx) };

console.log(
  `\nTick cost per store, one coordinator process, ${opts.rate} timeouts due/s per store, ${opts.window} s window, median of ${opts.rounds} round(s)\n`,
);
const header = [
  'stores',
  'CPU ms/store/s',
  'CPU ms/tick',
  'idle ms/store/s',
  'ticks/store/s',
  'PG ms/store/s',
  'scans/store/s',
  'late p50 ms',
  'late p99 ms',
  'mapped p50/p99 ms',
  'redis conns',
  'PG conns',
];
const rowsOut = summary.map((x) => [
  x.stores,
  x.cpuMsPerStorePerS,
  x.cpuMsPerTick,
  x.idleCpuMsPerStorePerS,
  x.ticksPerStorePerS,
  x.pgMsPerStorePerS,
  x.scansPerStorePerS,
  x.latenessP50Ms,
  x.latenessP99Ms,
  `${x.mappedP50Ms}/${x.mappedP99Ms}`,
  x.redisConnections,
  x.postgresConnections,
]);
const widths = header.map((h, i) => Math.max(h.length, ...rowsOut.map((r) => String(r[i]).length)));
console.log(header.map((h, i) => h.padStart(widths[i]!)).join('  '));
for (const r of rowsOut) console.log(r.map((v, i) => String(v).padStart(widths[i]!)).join('  '));
console.log(
  `\nper-store CPU at ${last.stores} vs ${first.stores} store(s): ${ratio}x; fitted over all runs: ${fit.msPerStorePerS} ms CPU/s per store + ${fit.interceptMsPerS} ms/s fixed`,
);
const errors = runs.flatMap((r) => r.errors.map((e) => `round ${r.round}, ${r.stores} stores: ${e}`));
if (errors.length) console.log(`\nproblems:\n  ${errors.join('\n  ')}`);

if (OUT !== '-') {
  writeFileSync(
    OUT,
    `${JSON.stringify(
      {
        command: 'npm run bench:store-ticks',
        at: new Date().toISOString(),
        host: { cpus: (await import('node:os')).cpus().length },
        parameters: { sizes: SIZES, ...opts, feedEveryMs: FEED_EVERY_MS, dueAheadMs: DUE_AHEAD_MS, config: 'defaults (coordinator, worker, poolSize 4)' },
        server: server.settings,
        summary,
        ratioCpuPerStore: ratio,
        fit,
        runs,
      },
      null,
      2,
    )}\n`,
  );
  console.log(`\nraw figures: ${OUT}`);
}
process.exit(errors.length ? 1 : 0);
