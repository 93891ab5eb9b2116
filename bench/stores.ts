// npm run bench:stores [-- options]: the same burst of N timeouts drained three ways, in
// interleaved rounds (issue 27, "Measured"):
//
//   one-database  orders and timeouts in the center's database (one PostgreSQL instance), the SQL
//                 handler without a route: the same-database path.
//   external      timeouts in the center's database, the orders spread over three business
//                 databases (three more instances) by `route: { by: modulo }` without `store`:
//                 today's external path (claim, handler in the orders' database, record).
//   beside        `store: beside` with the same modulo route: each order's timeout in the order's
//                 own database (three stores), the center holding nothing of the kind; the
//                 same-database path in each store, each store led by its own coordinator.
//
// Four private PostgreSQL instances (test/helpers/servers.ts: fsync off, as bench:external; plus
// track_commit_timestamp on) are started once: the center instance and three business instances.
// Every variant of every round gets fresh databases on them (dropped after it). `timeout-center
// migrate` prepares each the way the README says, then one `timeout-center run` process (plus
// `--workers - 1` worker processes) starts, a small warm-up (30 orders, every store and business
// database) drains, and the burst is seeded, due at one instant D a few seconds ahead: N orders
// (ids 1..N, every 10th paid) each with its timeout, written where the variant keeps it (beside:
// one INSERT ... SELECT per store, order and timeout in one statement in the order's database),
// then VACUUM ANALYZE and CHECKPOINT in every database (as bench/run.ts), all before D.
// The time is D → the commit of the last timeout of the burst to become final (max
// pg_xact_commit_timestamp(xmin) of its done_timeouts rows, in every database that holds them):
// the same measure for all three. Correctness: every timeout final, every unpaid order closed
// exactly once, no paid order touched, and (beside) nothing of the kind in the center.
//
// Settings are the product defaults (shard size 500, worker concurrency 4, databaseConcurrency 2)
// unless given below, the same for all three variants.
//
//   --n <count>          timeouts per burst (default 200,000)
//   --rounds <r>         interleaved rounds of the three bursts (default 3)
//   --workers <w>        worker processes: one `run` (coordinator + worker) and w - 1 `worker`s (default 1)
//   --concurrency <c>    worker concurrency (default: the product's, 4)
//   --shard-size <k>     shard size (default: the product's, 500)
//   --lead-ms <ms>       due instant this far after seeding starts (default 3,000 + N × 0.05)
//   --databases <d,...>  business databases behind the route (default 3: b0, b1, b2, one per
//                        business instance); more go round the three business instances (16: six
//                        on the first, five on each other), each a database of its own. Several
//                        counts (`--databases 3,16`) run external and beside once per count, in
//                        the same interleaved rounds (labelled external-3, external-16, ...)
//   --only <variants>    comma-separated subset of one-database,external,beside
//   --out <file>         also write the figures as JSON here
//   --profile            where the time goes (bench/lib/profile.ts): each instance's statements
//                        (pg_stat_statements), what the product's backends wait on (sampled), the
//                        CPU seconds of each instance and of the node processes
//   --help               this text
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startPostgres, stopAllServers, type PostgresServer } from '../test/helpers/servers.ts';
import { TEST_REDIS_URL, testKeyPrefix } from '../test/helpers/services.ts';
import { CLOSE_MANY_SQL, KIND, ORDERS_DDL, correctness, sleep } from './lib/orders.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';
import {
  ActivitySampler,
  enableProfiling,
  instanceCpu,
  printStatements,
  processCpu,
  resetStatements,
  topStatements,
  type StatementProfile,
} from './lib/profile.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    rounds: { type: 'string' },
    workers: { type: 'string' },
    concurrency: { type: 'string' },
    'shard-size': { type: 'string' },
    'lead-ms': { type: 'string' },
    databases: { type: 'string' },
    only: { type: 'string' },
    out: { type: 'string' },
    profile: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const TOOL = 'bench:stores';
const counts = positiveCounts(TOOL, { n: args.n, rounds: args.rounds, workers: args.workers }, { n: 200_000, rounds: 3, workers: 1 });
const DATABASE_COUNTS = (args.databases ?? '3').split(',').map((d) => positiveCounts(TOOL, { databases: d.trim() }, { databases: 3 }).databases);
const N = counts.n;
const ROUNDS = counts.rounds;
const WORKERS = counts.workers;
const opt = positiveCounts(
  TOOL,
  { concurrency: args.concurrency, 'shard-size': args['shard-size'], 'lead-ms': args['lead-ms'] },
  {
    concurrency: 0,
    'shard-size': 0,
    'lead-ms': Math.round(3000 + N * 0.05),
  },
);
const CONCURRENCY = args.concurrency === undefined ? undefined : opt.concurrency;
const SHARD = args['shard-size'] === undefined ? undefined : opt['shard-size'];
const LEAD_MS = opt['lead-ms'];
const ALL = ['one-database', 'external', 'beside'] as const;
type Variant = (typeof ALL)[number];
const VARIANTS: Variant[] = args.only ? (args.only.split(',').map((s) => s.trim()) as Variant[]) : [...ALL];
for (const v of VARIANTS) if (!ALL.includes(v)) failUsage(TOOL, `--only takes ${ALL.join(',')}, got ${v}`);
/** One burst's setting: a variant, over so many business databases (one-database: none). */
interface Setting {
  variant: Variant;
  databases: number;
  /** The variant's name, with its database count when several counts run. */
  label: string;
}
const SETTINGS: Setting[] = VARIANTS.flatMap((variant): Setting[] =>
  variant === 'one-database'
    ? [{ variant, databases: 0, label: variant }]
    : DATABASE_COUNTS.map((databases) => ({ variant, databases, label: DATABASE_COUNTS.length > 1 ? `${variant}-${databases}` : variant })),
);
const PROFILE = args.profile === true;
const CLI = new URL('../dist/cli/main.js', import.meta.url).pathname;
const businessNames = (count: number) => Array.from({ length: count }, (_, i) => `b${i}`);
/** The business instance each business database lives on. */
const onInstance = (i: number) => i % 3;
const WARMUP = 30;

interface Burst {
  variant: Variant;
  /** business databases behind the route (one-database: 0) */
  databases: number;
  label: string;
  round: number;
  /** D → the last timeout's commit, s */
  seconds: number;
  perSecond: number;
  /** seeded, vacuumed and checkpointed this long before D (ms; negative: after D, the figure includes the lag) */
  seedMarginMs: number;
  /** where the burst's timeouts became final: rows and D → last commit there (s) */
  perDatabase: { timeouts: number; seconds: number | null }[];
  /** WAL written by all four instances from after seeding to the end, per timeout */
  walBytesPerTimeout: number;
  /** the same, the center's instance / the three business instances together */
  centerWalBytesPerTimeout: number;
  businessWalBytesPerTimeout: number;
  ok: boolean;
  problems: string[];
}

async function walLsn(pool: pg.Pool): Promise<bigint> {
  const { rows } = await pool.query<{ b: string }>(`SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS b`);
  return BigInt(rows[0]!.b.split('.')[0]!);
}

/** A pool whose idle clients' errors (a database dropped, a server restarted) are not fatal. */
function quietPool(url: string, max = 2): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => {});
  return pool;
}

async function createDb(server: PostgresServer, name: string): Promise<string> {
  const admin = quietPool(server.url(), 1);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  return server.url(name);
}

async function dropDb(server: PostgresServer, name: string): Promise<void> {
  const admin = quietPool(server.url(), 1);
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
  await admin.end();
}

function runCli(argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...argv], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`timeout-center ${argv[0]} exited ${code}: ${err.slice(-2000)}`))));
  });
}

/** Orders [from, to] (every 10th paid) of business database `part` of `parts` (ids with id % parts
 *  = part), each with its timeout due at dueAt in the same statement (the README's way) when
 *  withTimeouts. */
async function seedOrders(pool: pg.Pool, from: number, to: number, parts: number, part: number, dueAt: Date, withTimeouts: boolean): Promise<void> {
  const orders = `INSERT INTO orders (id, status, due_at)
     SELECT i, CASE WHEN i % 10 = 0 THEN 'paid' ELSE 'unpaid' END, $3 FROM generate_series($1::bigint, $2::bigint) i WHERE i % $4 = $5`;
  if (!withTimeouts) await pool.query(orders, [from, to, dueAt, parts, part]);
  else
    await pool.query(
      `WITH o AS (${orders} RETURNING id)
       INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $6, id::text, $3 FROM o`,
      [from, to, dueAt, parts, part, KIND],
    );
}

async function lastShardId(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ id: number }>('SELECT coalesce(max(id), 0)::int AS id FROM timeout_center.shards');
  return rows[0]!.id;
}

async function timeoutsLeft(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE state NOT IN ('done', 'cancelled', 'failed')`);
  return rows[0]!.n;
}

async function burst(setting: Setting, round: number, center: PostgresServer, business: PostgresServer[]): Promise<Burst> {
  const { variant, label } = setting;
  const BUSINESS = businessNames(setting.databases);
  const name = `s_${label.replace(/-/g, '_')}_${round}`;
  const centerUrl = await createDb(center, name);
  const businessUrls = variant === 'one-database' ? [] : await Promise.all(BUSINESS.map((b, i) => createDb(business[onInstance(i)]!, `${name}_${b}`)));
  const centerPool = quietPool(centerUrl);
  const businessPools = businessUrls.map((url) => quietPool(url));
  const ordersPools = variant === 'one-database' ? [centerPool] : businessPools;
  // Where the kind's timeouts live.
  const timeoutPools = variant === 'beside' ? businessPools : [centerPool];
  const children: ChildProcess[] = [];
  try {
    await Promise.all(ordersPools.map((p) => p.query(ORDERS_DDL)));
    const handler =
      variant === 'one-database'
        ? { type: 'sql' as const, sql: CLOSE_MANY_SQL }
        : { type: 'sql' as const, sql: CLOSE_MANY_SQL, route: { by: 'modulo' as const, databases: [...BUSINESS] } };
    const configInput = {
      redisKeyPrefix: testKeyPrefix(`bench-stores-${label}`),
      ...(variant === 'one-database' ? {} : { businessDatabases: Object.fromEntries(BUSINESS.map((b, i) => [b, { url: businessUrls[i]! }])) }),
      kinds: { [KIND]: { ...(variant === 'beside' ? { store: 'beside' as const } : {}), ...(SHARD ? { shardSize: SHARD } : {}), handler } },
      ...(CONCURRENCY ? { worker: { concurrency: CONCURRENCY } } : {}),
      logLevel: 'warn' as const,
    };
    const dir = mkdtempSync(join(tmpdir(), 'tc-bench-stores-'));
    const configPath = join(dir, 'config.json');
    writeFileSync(configPath, JSON.stringify(configInput));
    const env = { ...process.env, DATABASE_URL: centerUrl, REDIS_URL: TEST_REDIS_URL };
    await runCli(['migrate', '--config', configPath], env);

    // Processes first; a warm-up through every database (leaders elected, every store's side and
    // every business pool opened), so the burst measures draining, not starting.
    for (let w = 0; w < WORKERS; w += 1) {
      children.push(spawn(process.execPath, [CLI, w === 0 ? 'run' : 'worker', '--config', configPath], { env, stdio: ['ignore', 'ignore', 'inherit'] }));
    }
    const warm = new Date(Date.now() - 1000);
    await seedAll(variant, N + 1, N + WARMUP, warm, ordersPools, centerPool);
    const warmStart = performance.now();
    while ((await Promise.all(timeoutPools.map(timeoutsLeft))).some((n) => n > 0)) {
      if (performance.now() - warmStart > 60_000) throw new Error(`${label}: warm-up not drained after 60 s`);
      await sleep(50);
    }

    // The burst: N orders with their timeouts, all due at D.
    const seedStart = Date.now();
    const due = new Date(seedStart + LEAD_MS);
    await seedAll(variant, 1, N, due, ordersPools, centerPool);
    // Every variant starts from the same state (as bench/run.ts): statistics and visibility map
    // current, and no checkpoint due mid-drain.
    const allPools = [centerPool, ...businessPools];
    await Promise.all(allPools.map((p) => p.query('VACUUM ANALYZE')));
    await Promise.all(allPools.map((p) => p.query('CHECKPOINT')));
    const seedMarginMs = due.getTime() - Date.now();
    // WAL per instance: one database of each instance that has any (several business databases
    // share an instance, and its WAL position is the instance's, not the database's).
    const instances = [center, ...business];
    const instancePools = [centerPool, ...business.map((_, k) => businessPools.find((__, i) => onInstance(i) === k))];
    const walPools = instancePools.filter((p): p is pg.Pool => p !== undefined);
    const walBefore = await Promise.all(walPools.map(walLsn));
    const shardsBefore = PROFILE ? await Promise.all(timeoutPools.map(lastShardId)) : [];
    // One sampler per instance (16 databases sampled one by one every 20 ms took a share of the
    // business instances' CPU): the center's database, and each business instance's databases.
    const samplers = PROFILE
      ? instancePools.flatMap((p, k) =>
          p === undefined ? [] : [new ActivitySampler(p, k === 0 ? name : BUSINESS.filter((_, i) => onInstance(i) === k - 1).map((b) => `${name}_${b}`))],
        )
      : [];
    const cpuBefore = PROFILE ? instances.map(instanceCpu) : [];
    const nodeBefore = PROFILE ? children.map((c) => processCpu(c.pid)) : [];
    if (PROFILE) {
      await Promise.all(allPools.map(resetStatements));
      for (const s of samplers) s.start();
    }
    const pollStart = performance.now();
    while ((await Promise.all(timeoutPools.map(timeoutsLeft))).some((n) => n > 0)) {
      if (performance.now() - pollStart > 600_000) throw new Error(`${label}: not drained after 10 min`);
      await sleep(250); // only tells when to read the end; the end itself is read at commit
    }
    const walAfter = await Promise.all(walPools.map(walLsn));
    if (PROFILE) {
      const nodeCpu = children.reduce((a, c, i) => a + processCpu(c.pid) - nodeBefore[i]!, 0);
      const cpu = instances.map((s, i) => instanceCpu(s) - cpuBefore[i]!);
      const activity = await Promise.all(samplers.map((s) => s.stop()));
      console.log(
        `profile round ${round} ${label}: ${((performance.now() - pollStart) / 1000).toFixed(2)} s from seeded to drained; CPU s: node ${nodeCpu.toFixed(2)}, ` +
          instances.map((_, i) => `${i === 0 ? 'center' : `business instance ${i}`} ${cpu[i]!.toFixed(2)}`).join(', '),
      );
      // The burst's shards per target: how many, their sizes (what per-shard costs are paid over).
      for (let i = 0; i < timeoutPools.length; i += 1) {
        const { rows } = await timeoutPools[i]!.query<{ target: string | null; shards: number; mean: number; min: number; max: number; rows: number }>(
          `SELECT target, count(*)::int AS shards, round(avg(size))::int AS mean, min(size)::int AS min, max(size)::int AS max, sum(size)::int AS rows
             FROM timeout_center.shards WHERE id > $1 GROUP BY target ORDER BY target`,
          [shardsBefore[i]],
        );
        console.log(
          `  shards per target: ${rows.map((r) => `${r.target ?? 'center'} ${r.shards} (${r.rows} rows, size mean ${r.mean}, ${r.min}-${r.max})`).join('; ')}`,
        );
        // When the shards ran: from the due instant to the first lease and the last record, how
        // many ran at once on average (their lease-to-record times over that span), and a shard's
        // time from lease to claim and from claim to record.
        const { rows: t } = await timeoutPools[i]!.query<Record<string, number>>(
          `SELECT extract(epoch FROM min(started_at) - $2)::float8 AS first_start, extract(epoch FROM max(finished_at) - $2)::float8 AS last_end,
                  (sum(extract(epoch FROM finished_at - started_at)) / nullif(extract(epoch FROM max(finished_at) - min(started_at)), 0))::float8 AS running,
                  (avg(extract(epoch FROM claimed_at - started_at)) * 1000)::float8 AS lease_to_claim_ms,
                  (avg(extract(epoch FROM finished_at - claimed_at)) * 1000)::float8 AS claim_to_record_ms,
                  (avg(extract(epoch FROM started_at - created_at)) * 1000)::float8 AS planned_to_lease_ms
             FROM timeout_center.shards WHERE id > $1 AND size > 0`,
          [shardsBefore[i], due],
        );
        const f = (x: number | undefined, d = 2) => (x === undefined || x === null ? '-' : x.toFixed(d));
        console.log(
          `  shards ran from D+${f(t[0]?.first_start)} s to D+${f(t[0]?.last_end)} s, ${f(t[0]?.running)} at once on average; per shard: planned to leased ${f(t[0]?.planned_to_lease_ms, 0)} ms, leased to claimed ${f(t[0]?.lease_to_claim_ms, 1)} ms, claimed to recorded ${f(t[0]?.claim_to_record_ms, 1)} ms`,
        );
      }
      console.log(`  center backends (average number in each state): ${JSON.stringify(activity[0])}`);
      printStatements('center statements', await topStatements(centerPool, 'center', 10));
      if (businessPools.length > 0) {
        // Every business database's backends and statements, summed: one database shows what each
        // does; their sum is what the business instances do.
        const states: Record<string, number> = {};
        for (const a of activity.slice(1)) for (const [k, v] of Object.entries(a)) states[k] = Number(((states[k] ?? 0) + v).toFixed(2));
        console.log(`  business backends, all ${businessPools.length} databases together (average number in each state): ${JSON.stringify(states)}`);
        const summed = new Map<string, StatementProfile>();
        for (const [i, p] of businessPools.entries())
          for (const r of await topStatements(p, BUSINESS[i]!, 20)) {
            const t = summed.get(r.query) ?? { ...r, calls: 0, totalMs: 0, planMs: 0, rows: 0, instance: 'business' };
            t.calls += r.calls;
            t.totalMs += r.totalMs;
            t.planMs += r.planMs;
            t.rows += r.rows;
            t.meanMs = Number((t.totalMs / Math.max(1, t.calls)).toFixed(3));
            summed.set(r.query, t);
          }
        printStatements(`business statements, all ${businessPools.length} databases`, [...summed.values()].sort((x, y) => y.totalMs - x.totalMs).slice(0, 12));
      }
    }
    // The end: the commit of the last of the burst's timeouts to become final, wherever it lives.
    const ends = await Promise.all(
      timeoutPools.map(async (p) => {
        const { rows } = await p.query<{ end: number | null; n: number }>(
          `SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)))::float8 AS end, count(*)::int AS n
             FROM timeout_center.done_timeouts WHERE due_at = $1`,
          [due],
        );
        return rows[0]!;
      }),
    );
    if (ends.some((e) => e.n > 0 && e.end === null)) throw new Error('no commit timestamps: track_commit_timestamp is off');
    const end = Math.max(...ends.map((e) => e.end ?? 0));
    const finalRows = ends.reduce((a, e) => a + e.n, 0);
    const seconds = end - due.getTime() / 1000;
    const perDatabase = ends.map((e) => ({ timeouts: e.n, seconds: e.end === null ? null : Number((e.end - due.getTime() / 1000).toFixed(3)) }));

    for (const c of children) c.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
    children.length = 0;

    // Correctness, summed over the orders' databases.
    const problems: string[] = [];
    let closedOnce = 0;
    for (const p of ordersPools) {
      const c = await correctness(p, undefined);
      closedOnce += c.closedOnce;
      problems.push(...c.problems);
    }
    for (const p of timeoutPools) {
      const left = await timeoutsLeft(p);
      if (left > 0) problems.push(`${left} timeouts not final`);
      const { rows } = await p.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE state = 'failed'`);
      if (rows[0]!.n > 0) problems.push(`${rows[0]!.n} timeouts failed`);
    }
    const unpaid = N + WARMUP - Math.floor((N + WARMUP) / 10);
    if (closedOnce !== unpaid) problems.push(`${closedOnce} orders closed once, expected ${unpaid}`);
    if (finalRows !== N) problems.push(`${finalRows} of the burst's ${N} timeouts done`);
    if (variant === 'beside') {
      const { rows } = await centerPool.query<{ n: number }>('SELECT count(*)::int AS n FROM timeout_center.all_timeouts');
      if (rows[0]!.n > 0) problems.push(`${rows[0]!.n} timeouts in the center's database`);
    }
    const walOf = walAfter.map((w, i) => Number(w - walBefore[i]!));
    const walBytes = walOf.reduce((a, w) => a + w, 0);
    return {
      variant,
      databases: setting.databases,
      label,
      round,
      seconds,
      perSecond: N / seconds,
      seedMarginMs,
      perDatabase,
      walBytesPerTimeout: walBytes / N,
      centerWalBytesPerTimeout: walOf[0]! / N,
      businessWalBytesPerTimeout: (walBytes - walOf[0]!) / N,
      ok: problems.length === 0,
      problems,
    };
  } finally {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await centerPool.end().catch(() => {});
    await Promise.all(businessPools.map((p) => p.end().catch(() => {})));
    await dropDb(center, name);
    if (variant !== 'one-database') await Promise.all(BUSINESS.map((b, i) => dropDb(business[onInstance(i)]!, `${name}_${b}`)));
  }
}

/** Orders [from, to] and their timeouts, where the variant keeps them. */
async function seedAll(variant: Variant, from: number, to: number, dueAt: Date, ordersPools: pg.Pool[], centerPool: pg.Pool): Promise<void> {
  if (variant === 'one-database') return seedOrders(centerPool, from, to, 1, 0, dueAt, true);
  if (variant === 'beside') {
    await Promise.all(ordersPools.map((p, i) => seedOrders(p, from, to, ordersPools.length, i, dueAt, true)));
    return;
  }
  await Promise.all([
    ...ordersPools.map((p, i) => seedOrders(p, from, to, ordersPools.length, i, dueAt, false)),
    centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, $4 FROM generate_series($2::bigint, $3::bigint) g`, [
      KIND,
      from,
      to,
      dueAt,
    ]),
  ]);
}

async function startInstance(): Promise<PostgresServer> {
  const s = await startPostgres();
  const admin = new pg.Client({ connectionString: s.url() });
  admin.on('error', () => {});
  await admin.connect();
  await admin.query('ALTER SYSTEM SET track_commit_timestamp = on');
  // as deploy's PostgreSQL (docker-compose.yml): the external variant's first runs commit in two
  // phases (src/worker/two-phase.ts); the same-database variants never prepare anything
  await admin.query('ALTER SYSTEM SET max_prepared_transactions = 64');
  await admin.end();
  await s.restart('fast');
  return s;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const results: Burst[] = [];
try {
  const [center, ...business] = await Promise.all([0, 1, 2, 3].map(() => startInstance()));
  if (PROFILE) await Promise.all([center!, ...business].map(enableProfiling));
  console.log(
    `${N} timeouts per burst, ${ROUNDS} rounds, ${WORKERS} worker process(es), concurrency ${CONCURRENCY ?? 'default'}, shard size ${SHARD ?? 'default'}, due ${LEAD_MS} ms after seeding starts`,
  );
  for (let round = 1; round <= ROUNDS; round += 1) {
    // Interleaved: the order rotates each round.
    const order = SETTINGS.map((_, i) => SETTINGS[(i + round - 1) % SETTINGS.length]!);
    for (const setting of order) {
      const r = await burst(setting, round, center!, business);
      results.push(r);
      console.log(
        `round ${round} ${r.label.padEnd(12)} ${N} timeouts in ${r.seconds.toFixed(2)} s = ${Math.round(r.perSecond)}/s, ` +
          `WAL ${Math.round(r.walBytesPerTimeout)} B/timeout (center ${Math.round(r.centerWalBytesPerTimeout)}, business ${Math.round(r.businessWalBytesPerTimeout)}), ` +
          `ready ${r.seedMarginMs} ms before due${r.perDatabase.length > 1 ? `, per store ${r.perDatabase.map((d) => `${d.timeouts} in ${d.seconds} s`).join(' / ')}` : ''}${r.ok ? '' : ` PROBLEMS: ${r.problems.join('; ')}`}`,
      );
    }
  }
} finally {
  await stopAllServers();
}

const LABELS = SETTINGS.map((s) => s.label);
const medians: Record<string, number> = Object.fromEntries(
  LABELS.map((l) => [l, Math.round(median(results.filter((r) => r.label === l).map((r) => r.perSecond)))]),
);
/** a's rate over b's, round by round (the same round: the same box, minutes apart) */
const perRound = (a: string, b: string) =>
  Array.from({ length: ROUNDS }, (_, i) => {
    const x = results.find((r) => r.label === a && r.round === i + 1);
    const y = results.find((r) => r.label === b && r.round === i + 1);
    return x && y ? Number((x.perSecond / y.perSecond).toFixed(2)) : null;
  });
const over = (a: string, b: string) => (medians[a] && medians[b] ? Number((medians[a] / medians[b]).toFixed(2)) : null);
const others = LABELS.filter((l) => l !== 'one-database');
// Several database counts: each count's median over the first count's, per variant (e.g.
// external-16 / external-3), and per round.
const acrossCounts =
  DATABASE_COUNTS.length > 1
    ? VARIANTS.filter((v) => v !== 'one-database').flatMap((v) =>
        DATABASE_COUNTS.slice(1).map((d) => {
          const a = `${v}-${d}`;
          const b = `${v}-${DATABASE_COUNTS[0]}`;
          return { ratio: `${a} / ${b}`, median: over(a, b), perRound: perRound(a, b) };
        }),
      )
    : [];
const summary = {
  n: N,
  rounds: ROUNDS,
  workers: WORKERS,
  concurrency: CONCURRENCY ?? 'default (4)',
  databaseConcurrency: 'default (2)',
  shardSize: SHARD ?? 'default (500)',
  leadMs: LEAD_MS,
  businessDatabases: DATABASE_COUNTS,
  instances: 'four private PostgreSQL instances (fsync off, track_commit_timestamp on, max_prepared_transactions 64), fresh databases per variant per round',
  medianPerSecond: medians,
  besideOverOneDatabase: over('beside', 'one-database'),
  externalOverOneDatabase: over('external', 'one-database'),
  perRoundBesideOverOneDatabase: perRound('beside', 'one-database'),
  perRoundExternalOverOneDatabase: perRound('external', 'one-database'),
  overOneDatabase: Object.fromEntries(others.map((l) => [l, { median: over(l, 'one-database'), perRound: perRound(l, 'one-database') }])),
  acrossCounts,
  medianWalBytesPerTimeout: Object.fromEntries(
    LABELS.map((l) => {
      const rs = results.filter((r) => r.label === l);
      return [
        l,
        { center: Math.round(median(rs.map((r) => r.centerWalBytesPerTimeout))), business: Math.round(median(rs.map((r) => r.businessWalBytesPerTimeout))) },
      ];
    }),
  ),
  allCorrect: results.every((r) => r.ok),
  runs: results,
};
console.log(
  `median: ${LABELS.map((l) => `${l} ${medians[l]}/s`).join(', ')}; ` +
    others.map((l) => `${l}/one-database ${summary.overOneDatabase[l]?.median}x (per round ${summary.overOneDatabase[l]?.perRound.join(', ')})`).join(', ') +
    acrossCounts.map((a) => `; ${a.ratio} ${a.median}x (per round ${a.perRound.join(', ')})`).join('') +
    (summary.allCorrect ? ', all correct' : ', PROBLEMS (see above)'),
);
if (args.out) writeFileSync(args.out, JSON.stringify(summary, null, 2));
if (!summary.allCorrect) process.exit(1);
