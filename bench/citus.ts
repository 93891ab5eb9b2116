// npm run bench:citus [-- options]: the same burst of N timeouts drained by the center on one plain
// PostgreSQL and on a three-node Citus cluster (a coordinator and two worker nodes, the Citus
// layout applied by `timeout-center migrate`; test/helpers/citus.ts), in interleaved rounds, on
// this one machine (issue 34, "Measured"; docs/scale.md "Citus: what runs").
//
// Each round and system gets a fresh database: `timeout-center migrate`, one `timeout-center run`
// process (coordinator + worker, product defaults unless given), a warm-up of 30, then N orders
// (every 10th paid) with their timeouts due at one instant D a few seconds ahead (on Citus the
// insert names the bucket, README section 3e), VACUUM ANALYZE and CHECKPOINT on every node.
// The close is the same UPDATE everywhere; where the orders live:
//   plain               one PostgreSQL, orders(id primary key): the leanest that does the work
//   citus (colocated)   orders distributed on the same bucket as the timeouts, colocated with them
//                       (primary key (id, bucket)); the handler names the shard's bucket ($2), so the
//                       claim, the close and the move run as one call on the bucket's worker node
//                       (claim_colocated.sql). The timeout center apart from the business systems.
//   citus-coordinator   orders a plain table on the Citus coordinator, the handler as on plain (the
//                       claim planned apart by Citus: every row through the coordinator)
// The time is D -> the commit of the last of the burst's timeouts to become final (the commit that
// moved its history row and closed its order: max pg_xact_commit_timestamp(xmin) of the burst's
// done_timeouts rows, read on each Citus worker node per shard; every node runs with
// track_commit_timestamp on; the same measure for all). CPU: utime + stime of every
// postgres process of each node (the postmaster's own, its reaped children's, and its live
// children's, from /proc) from just before D to the end, per 100,000 timeouts; the Citus
// coordinator node's share against the worker nodes' total is what decides how far adding worker
// nodes scales. Correctness: every timeout done, every unpaid order closed exactly once.
//
//   --n <count>          timeouts per burst (default 200,000)
//   --rounds <r>         interleaved rounds (default 3)
//   --concurrency <c>    worker concurrency (default: the product's)
//   --shard-size <s>     the kind's shardSize (default: the product's)
//   --lead-ms <ms>       due instant this far after seeding starts (default 5,000 + N x 0.15)
//   --citus <list>       the Citus variants, comma-separated: colocated, coordinator (default:
//                        colocated), each against plain in every round
//   --out <file>         also write the figures as JSON here
//   --profile            where each node's CPU goes (bench/lib/profile.ts): pg_stat_statements
//                        loaded on every node (plan and execution time, utility statements: the
//                        two-phase commits), reset before the burst and read after; CPU per
//                        process from /proc, labelled from pg_stat_activity. Costs some CPU
//                        itself: profile rounds are for where, not for the ratio.
//   --perf <dir>         with --profile: `perf record -g` of the Citus coordinator node's processes
//                        (and plain's) during the burst, one perf.data per system and round in <dir>
//   --help               this text
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startCitusCluster, type CitusCluster } from '../test/helpers/citus.ts';
import { startPostgres, stopAllServers, type PostgresServer } from '../test/helpers/servers.ts';
import { TEST_REDIS_URL, testKeyPrefix } from '../test/helpers/services.ts';
import { KIND, ORDERS_DDL, sleep } from './lib/orders.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';
import { cpuByLabel, snapshotProcesses, statementTotals, type ProcessSnapshot } from './lib/profile.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    rounds: { type: 'string' },
    concurrency: { type: 'string' },
    'shard-size': { type: 'string' },
    'lead-ms': { type: 'string' },
    out: { type: 'string' },
    profile: { type: 'boolean', default: false },
    perf: { type: 'string' },
    citus: { type: 'string', default: 'colocated' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const TOOL = 'bench:citus';
const c = positiveCounts(TOOL, { n: args.n, rounds: args.rounds }, { n: 200_000, rounds: 3 });
const N = c.n;
const ROUNDS = c.rounds;
const o = positiveCounts(
  TOOL,
  { concurrency: args.concurrency, 'lead-ms': args['lead-ms'], 'shard-size': args['shard-size'] },
  { concurrency: 0, 'lead-ms': Math.round(5000 + N * 0.15), 'shard-size': 0 },
);
const CLI = new URL('../dist/cli/main.js', import.meta.url).pathname;
const WARMUP = 30;
type System = 'plain' | 'citus' | 'citus-coordinator';
const VARIANTS: Record<string, System> = { colocated: 'citus', coordinator: 'citus-coordinator' };
const CITUS: System[] = args.citus.split(',').map((v) => VARIANTS[v.trim()] ?? failUsage(TOOL, `--citus takes colocated, coordinator; got ${v}`));
/** The close, the same statement for both systems. Its stamp is now(), not clock_timestamp() as
 *  bench/lib/orders.ts's: Citus refuses a VOLATILE function in an UPDATE of a query that touches
 *  distributed tables (every batch claim failed on it, and ran in the plain form instead). The
 *  bench's time is read from the history's finished_at, not from closed_at. */
const CLOSE_SQL = "UPDATE orders SET status = 'closed', closed_at = now(), closes = closes + 1 WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";
/** The same close on orders colocated with the timeouts: the shard's bucket ($2) names the shard. */
const CLOSE_COLOCATED_SQL =
  "UPDATE orders SET status = 'closed', closed_at = now(), closes = closes + 1 WHERE bucket = $2 AND id = ANY($1) AND status = 'unpaid' RETURNING id";
/** Orders distributed on the bucket, colocated with timeouts (after migrate laid timeouts out). */
const ORDERS_COLOCATED_DDL = `
  CREATE TABLE orders (
    id        bigint NOT NULL,
    bucket    smallint NOT NULL,
    status    text NOT NULL,
    due_at    timestamptz NOT NULL,
    closed_at timestamptz,
    closes    integer NOT NULL DEFAULT 0,
    PRIMARY KEY (id, bucket)
  );
  SELECT create_distributed_table('orders', 'bucket', colocate_with => 'timeout_center.timeouts')`;
const PROFILE = args.profile === true;
const PROFILE_SETTINGS = {
  'pg_stat_statements.track': 'all',
  'pg_stat_statements.track_utility': 'on',
  'pg_stat_statements.track_planning': 'on',
  'pg_stat_statements.max': '10000',
} as const;

/** CPU seconds of every postgres process of a server: the postmaster, its reaped children
 *  (cutime/cstime) and its live children. */
function serverCpuSeconds(server: PostgresServer): number {
  const pid = Number(readFileSync(join(server.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  const tick = 100; // USER_HZ on Linux
  const fields = (p: number): string[] | undefined => {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    } catch {
      return undefined;
    }
  };
  const own = fields(pid);
  if (!own) return 0;
  // after ')' : [0] state [1] ppid ... [11] utime [12] stime [13] cutime [14] cstime
  let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const f = fields(Number(d));
    if (f && Number(f[1]) === pid) ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / tick;
}

/** perf record -g of a server's live processes (the postmaster's children) until stopPerf. */
function startPerf(server: PostgresServer, out: string): ChildProcess {
  const pm = Number(readFileSync(join(server.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  const pids = readdirSync('/proc').filter((d) => {
    if (!/^\d+$/.test(d)) return false;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pm;
    } catch {
      return false;
    }
  });
  return spawn('perf', ['record', '-F', '4999', '-g', '-o', out, '-p', pids.join(',')], { stdio: 'ignore' });
}

async function stopPerf(perf: ChildProcess): Promise<void> {
  perf.kill('SIGINT');
  await new Promise((r) => perf.once('exit', r));
}

function quietPool(url: string, max = 2): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => {});
  return pool;
}

function runCli(argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...argv], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (x: string) => (err += x));
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`timeout-center ${argv[0]} exited ${code}: ${err.slice(-2000)}`))));
  });
}

async function seed(pool: pg.Pool, system: System, from: number, to: number, dueAt: Date): Promise<void> {
  const bucket = system !== 'plain' ? [', bucket', ', timeout_center.bucket_of(i::text)'] : ['', ''];
  const orderBucket = system === 'citus' ? [', bucket', ', timeout_center.bucket_of(i::text)'] : ['', ''];
  await pool.query(
    `INSERT INTO orders (id, status, due_at${orderBucket[0]})
     SELECT i, CASE WHEN i % 10 = 0 THEN 'paid' ELSE 'unpaid' END, $3${orderBucket[1]} FROM generate_series($1::bigint, $2::bigint) i`,
    [from, to, dueAt],
  );
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at${bucket[0]})
     SELECT $4, i::text, $3${bucket[1]} FROM generate_series($1::bigint, $2::bigint) i`,
    [from, to, dueAt, KIND],
  );
}

/** Whether the drain is over: first the shards' sizes summed on the (Citus coordinator) node's
 *  control plane, then, once they reach what was seeded, two index probes of the timeouts (the due
 *  index, the in-flight index) to be sure. Polling every 250 ms then costs next to nothing on
 *  either system: a count of the timeouts read every row version left by the drain, on every
 *  poll, and on Citus went to every shard. */
async function drained(pool: pg.Pool, expected: number): Promise<boolean> {
  const { rows } = await pool.query<{ n: string }>(`SELECT coalesce(sum(size), 0) AS n FROM timeout_center.shards WHERE state = 'done'`);
  return Number(rows[0]!.n) >= expected && !(await busy(pool));
}

async function busy(pool: pg.Pool): Promise<boolean> {
  const { rows: pending } = await pool.query(`SELECT 1 FROM timeout_center.timeouts WHERE kind = $1 AND state = 'pending' LIMIT 1`, [KIND]);
  if (pending.length > 0) return true;
  const { rows: inFlight } = await pool.query(`SELECT 1 FROM timeout_center.timeouts WHERE state = 'dispatched' LIMIT 1`);
  return inFlight.length > 0;
}

interface Burst {
  system: System;
  round: number;
  seconds: number;
  perSecond: number;
  /** D -> the latest finished_at of the burst (stamped before the commit): the measure before
   *  issue 34's last pass, kept to show what reading at commit changed */
  secondsToLastStamp: number;
  seedMarginMs: number;
  /** CPU seconds per 100,000 timeouts: the (Citus coordinator) node, and the Citus worker nodes */
  cpuCoordinatorPer100k: number;
  cpuWorkersPer100k: number | null;
  /** the box's 1-minute load average at the due instant and at the end */
  load: [number, number];
  problems: string[];
  shards: number;
  shardsRunAgain: number;
  /** warn/error lines the run process logged; its log file */
  warnings: number;
  log: string;
  /** --profile: per node, CPU seconds per process label and the statements' figures */
  profile?: Record<string, unknown>;
}

/** Every node records its commits' times: the end of a burst is read at commit. */
const COMMIT_TIMES = { track_commit_timestamp: 'on' } as const;

/** The commit of the last of the burst's timeouts to become final (epoch s): the commit that moved
 *  its row into done_timeouts and closed its order, read where the row lives. On Citus each shard
 *  of done_timeouts is read on its worker node (run_command_on_shards: Citus does not read a
 *  system column such as xmin through the distributed table), so the time is the worker node's
 *  commit (COMMIT PREPARED under two-phase commit), when the close became visible. */
async function lastCommit(pool: pg.Pool, system: System, due: Date): Promise<number> {
  const last = `SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)))::float8 AS end FROM %s WHERE due_at = '${due.toISOString()}'::timestamptz`;
  const { rows } =
    system === 'plain'
      ? await pool.query<{ end: number | null }>(last.replace('%s', 'timeout_center.done_timeouts'))
      : await pool.query<{ end: number | null }>(
          `SELECT max(nullif(result, '')::float8) AS end FROM run_command_on_shards('timeout_center.done_timeouts', $1) WHERE success`,
          [last],
        );
  const end = rows[0]?.end ?? null;
  if (end === null) throw new Error(`${system}: no commit timestamps on the burst's rows (track_commit_timestamp off?)`);
  return end;
}

async function burst(system: System, round: number, plain: PostgresServer, cluster: CitusCluster): Promise<Burst> {
  const name = `bc_${system.replace('-', '_')}_${round}`;
  let url: string;
  if (system === 'plain') {
    const admin = quietPool(plain.url(), 1);
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    url = plain.url(name);
  } else {
    url = await cluster.createDatabase(name);
  }
  const pool = quietPool(url, 4);
  const children: ChildProcess[] = [];
  try {
    if (system !== 'citus') await pool.query(ORDERS_DDL);
    const config = {
      redisKeyPrefix: testKeyPrefix(`bench-citus-${system}`),
      kinds: {
        [KIND]: {
          handler: { type: 'sql' as const, sql: system === 'citus' ? CLOSE_COLOCATED_SQL : CLOSE_SQL },
          ...(args['shard-size'] ? { shardSize: o['shard-size'] } : {}),
        },
      },
      ...(o.concurrency > 0 && args.concurrency ? { worker: { concurrency: o.concurrency } } : {}),
      logLevel: 'warn' as const,
    };
    const dir = mkdtempSync(join(tmpdir(), 'tc-bench-citus-'));
    const configPath = join(dir, 'config.json');
    writeFileSync(configPath, JSON.stringify(config));
    const env = { ...process.env, DATABASE_URL: url, REDIS_URL: TEST_REDIS_URL };
    await runCli(['migrate', '--config', configPath], env);
    if (system === 'citus') await pool.query(ORDERS_COLOCATED_DDL);
    // the process's log (warn and up) kept beside its config, named in the figures
    const logPath = join(dir, 'run.log');
    const logFd = openSync(logPath, 'w');
    // --profile: the coordinator and the worker as two processes (their connections then show
    // apart in pg_stat_activity: CPU per role); otherwise one `run` process, as measured.
    for (const role of PROFILE ? ['coordinator', 'worker'] : ['run'])
      children.push(spawn(process.execPath, [CLI, role, '--config', configPath], { env, stdio: ['ignore', logFd, 'inherit'] }));
    closeSync(logFd);
    await seed(pool, system, N + 1, N + WARMUP, new Date(Date.now() - 1000));
    const warm = performance.now();
    while (!(await drained(pool, WARMUP))) {
      if (performance.now() - warm > 120_000) throw new Error(`${system}: warm-up not drained after 120 s`);
      await sleep(100);
    }
    const due = new Date(Date.now() + o['lead-ms']);
    await seed(pool, system, 1, N, due);
    await pool.query('VACUUM ANALYZE');
    const nodes = system === 'plain' ? [plain] : [cluster.coordinator, ...cluster.workers];
    for (const n of nodes) {
      const admin = quietPool(n.url(), 1);
      await admin.query('CHECKPOINT');
      await admin.end();
    }
    const seedMarginMs = due.getTime() - Date.now();
    if (seedMarginMs > 200) await sleep(seedMarginMs - 200);
    const labels = system === 'plain' ? ['plain'] : ['coordinator', ...cluster.workers.map((_, i) => `worker ${i + 1}`)];
    let snapshots: ProcessSnapshot[] = [];
    if (PROFILE) {
      for (const n of nodes) {
        const p = quietPool(n.url(name), 1);
        // on the Citus coordinator the extension is created locally only (not propagated)
        await p.query('SET citus.enable_ddl_propagation = off').catch(() => {});
        await p.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
        await p.query('SELECT pg_stat_statements_reset()');
        await p.end();
      }
      snapshots = await Promise.all(nodes.map(snapshotProcesses));
    }
    // --perf: sample the (coordinator) node's processes alive now: the product's pooled
    // connections, which do the drain's work there
    const perf = PROFILE && args.perf ? startPerf(nodes[0]!, join(args.perf, `${name}.perf.data`)) : undefined;
    const cpuBefore = nodes.map(serverCpuSeconds);
    const loadAtDue = loadavg()[0]!;
    const start = performance.now();
    while (!(await drained(pool, WARMUP + N))) {
      if (performance.now() - start > 900_000) throw new Error(`${system}: not drained after 15 min`);
      await sleep(250);
    }
    const cpuAfter = nodes.map(serverCpuSeconds);
    if (perf) await stopPerf(perf);
    let profile: Record<string, unknown> | undefined;
    if (PROFILE) {
      const after = await Promise.all(nodes.map(snapshotProcesses));
      profile = {};
      for (const [i, n] of nodes.entries()) {
        const p = quietPool(n.url(name), 1);
        profile[labels[i]!] = {
          cpuSeconds: cpuAfter[i]! - cpuBefore[i]!,
          cpuByProcess: cpuByLabel(snapshots[i]!, after[i]!),
          ...(await statementTotals(p, labels[i]!)),
        };
        await p.end();
      }
    }
    const { rows } = await pool.query<{ n: number; stamp: number }>(
      `SELECT count(*)::int AS n, extract(epoch FROM max(finished_at))::float8 AS stamp FROM timeout_center.done_timeouts WHERE due_at = $1`,
      [due],
    );
    const seconds = (await lastCommit(pool, system, due)) - due.getTime() / 1000;
    const cpu = cpuAfter.map((a, i) => a - cpuBefore[i]!);
    const per100k = (x: number) => Number(((x * 100_000) / N).toFixed(2));
    const problems: string[] = [];
    if (rows[0]!.n !== N) problems.push(`${rows[0]!.n} of ${N} done`);
    const { rows: closes } = await pool.query<{ once: number; more: number }>(
      `SELECT count(*) FILTER (WHERE closes = 1)::int AS once, count(*) FILTER (WHERE closes > 1 OR (status = 'paid' AND closes > 0))::int AS more FROM orders`,
    );
    const unpaid = N + WARMUP - Math.floor((N + WARMUP) / 10);
    if (closes[0]!.once !== unpaid) problems.push(`${closes[0]!.once} orders closed once, expected ${unpaid}`);
    if (closes[0]!.more > 0) problems.push(`${closes[0]!.more} orders closed twice or paid ones closed`);
    // Shards that ran more than once (a lease lost, a transaction retried) and the process's
    // warnings: a drain that only looks slow may be one that redoes its work.
    const { rows: sh } = await pool.query<{ shards: number; again: number }>(
      `SELECT count(*)::int AS shards, count(*) FILTER (WHERE attempts > 1)::int AS again FROM timeout_center.shards`,
    );
    const warnings = readFileSync(logPath, 'utf8')
      .split('\n')
      .filter((l) => /"level":(4|5|6)0/.test(l)).length;
    return {
      system,
      round,
      seconds: Number(seconds.toFixed(3)),
      perSecond: Math.round(N / seconds),
      secondsToLastStamp: Number((rows[0]!.stamp - due.getTime() / 1000).toFixed(3)),
      seedMarginMs,
      cpuCoordinatorPer100k: per100k(cpu[0]!),
      cpuWorkersPer100k: system !== 'plain' ? per100k(cpu.slice(1).reduce((a, b) => a + b, 0)) : null,
      load: [Number(loadAtDue.toFixed(1)), Number(loadavg()[0]!.toFixed(1))],
      problems,
      shards: sh[0]!.shards,
      shardsRunAgain: sh[0]!.again,
      warnings,
      log: logPath,
      ...(profile ? { profile } : {}),
    };
  } finally {
    for (const ch of children) if (ch.exitCode === null && ch.signalCode === null) ch.kill('SIGTERM');
    await Promise.all(children.map((ch) => (ch.exitCode === null && ch.signalCode === null ? new Promise((r) => ch.once('exit', r)) : undefined)));
    await pool.end().catch(() => {});
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main(): Promise<void> {
  const plain = await startPostgres({
    settings: { max_connections: '300', ...COMMIT_TIMES, ...(PROFILE ? { shared_preload_libraries: 'pg_stat_statements', ...PROFILE_SETTINGS } : {}) },
  });
  const cluster = await startCitusCluster(2, {
    ...COMMIT_TIMES,
    ...(PROFILE ? { shared_preload_libraries: 'citus,pg_stat_statements', ...PROFILE_SETTINGS } : {}),
  });
  const bursts: Burst[] = [];
  try {
    for (let r = 1; r <= ROUNDS; r += 1) {
      const systems: System[] = ['plain', ...CITUS];
      const order = r % 2 === 1 ? systems : [...systems].reverse();
      for (const system of order) {
        const b = await burst(system, r, plain, cluster);
        bursts.push(b);
        console.log(JSON.stringify(b, null, PROFILE ? 1 : undefined));
      }
    }
  } finally {
    await stopAllServers();
  }
  const of = (s: System) => bursts.filter((b) => b.system === s);
  const plainPerSecond = median(of('plain').map((b) => b.perSecond));
  /** One Citus variant against plain: medians, the ratio of medians and per round, the CPU split. */
  const figures = (system: System) => {
    const citus = of(system);
    const coordinator = median(citus.map((b) => b.cpuCoordinatorPer100k));
    const workers = median(citus.map((b) => b.cpuWorkersPer100k ?? 0));
    return {
      citusPerSecond: median(citus.map((b) => b.perSecond)),
      ratioOfMedians: Number((median(citus.map((b) => b.perSecond)) / plainPerSecond).toFixed(3)),
      ratiosPerRound: [...new Set(bursts.map((b) => b.round))].map((r) => {
        const p = bursts.find((b) => b.round === r && b.system === 'plain')!;
        const ci = bursts.find((b) => b.round === r && b.system === system)!;
        return Number((ci.perSecond / p.perSecond).toFixed(3));
      }),
      citusCoordinatorCpuPer100k: coordinator,
      citusWorkersCpuPer100k: workers,
      coordinatorShare: Number((coordinator / Math.max(workers, 1e-9)).toFixed(3)),
    };
  };
  const summary = {
    n: N,
    rounds: ROUNDS,
    plainPerSecond,
    plainCpuPer100k: median(of('plain').map((b) => b.cpuCoordinatorPer100k)),
    // the first variant asked for (colocated by default) at the top level, every variant below
    ...figures(CITUS[0]!),
    variants: Object.fromEntries(CITUS.map((v) => [v, figures(v)])),
    loadAverage: { min: Math.min(...bursts.flatMap((b) => b.load)), max: Math.max(...bursts.flatMap((b) => b.load)) },
    problems: bursts.flatMap((b) => b.problems.map((p) => `${b.system} round ${b.round}: ${p}`)),
    bursts,
  };
  console.log(JSON.stringify(summary, null, 2));
  if (args.out) writeFileSync(args.out, JSON.stringify(summary, null, 2));
  if (summary.problems.length > 0) process.exitCode = 1;
}

await main();
