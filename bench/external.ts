// npm run bench:external [-- options]: the same burst twice, with the orders in the center's own
// database (the one-write path) and with the orders in a separate database on a second PostgreSQL
// instance on the same box (the external path: a shard's first run in two phases, claim and record
// in one center transaction PREPAREd before the business commit; src/worker/two-phase.ts). Two
// private PostgreSQL instances (fsync off, as the test servers; the center's with
// track_commit_timestamp on and max_prepared_transactions 64) are started once; every burst gets fresh databases and
// one `timeout-center run` process (coordinator + worker), a warm-up of 30 orders through both
// databases, then N timeouts (90 % unpaid orders) due at one instant D a few seconds ahead,
// seeded, vacuumed and checkpointed before D. The time is D -> the commit of the last of the
// burst's timeouts to become final in the center (max pg_xact_commit_timestamp(xmin) of its
// done_timeouts rows), the same measure for both paths and as bench:stores. Prints both rates, and the
// cost per timeout of the external path's extra work: wall time and the center's WAL bytes per
// timeout (since issue 32 below the same-database path's: the claim writes only the shard's row).
//
//   --n <count>          timeouts per burst (default 50,000)
//   --rounds <r>         interleaved rounds of both bursts (default 2)
//   --concurrency <c>    worker concurrency (default 4)
//   --shard-size <k>     shard size (default 1000)
//   --out <file>         also write the figures as JSON here
//   --references         also run, in the same rounds, the physical references of both shapes on the
//                        minimal schema (bench/lib/limit.ts), hand-written SQL looped by
//                        --concurrency connections taking --shard-size rows per transaction:
//                        sql-one-database (lock, close and mark in one statement, orders beside
//                        the timeouts) and sql-two-databases (lock and mark in the center, close in
//                        the business database, then the center's COMMIT: the leanest two-database
//                        shape, with the center's row locks held across the business call, which
//                        the product does not do; docs/reliability.md section 11). Their ratio is
//                        what this box allows a two-database path at best. A third,
//                        sql-two-databases-noted, also notes each timeout it ran in the business
//                        transaction (a row each, deleted after the center's commit): the leanest
//                        shape that could record a run exactly after a crash between the commits.
//                        A fourth, sql-two-databases-prepared, PREPAREs the center's transaction
//                        before the business COMMIT and commits it after (two-phase commit, a
//                        decision row per batch in the business database): exact without a note per
//                        timeout (the center instance runs with max_prepared_transactions).
//   --baseline <dir>     also run, in the same rounds, the external path of another checkout's build
//                        (<dir>/dist: git worktree add <dir> <commit>; npm run build there) as
//                        external-baseline, with that checkout's migrations: a change to the path
//                        measured against what it replaces on the same box in the same run
//   --profile            where the time goes (bench/lib/profile.ts): each instance's statements
//                        (pg_stat_statements), what the product's backends wait on (sampled), the
//                        CPU seconds of each instance and of the node process
//   --help               this text
// BENCH_CHILD_NODE_OPTIONS (environment): NODE_OPTIONS of the product's process only, e.g.
// "--cpu-prof --cpu-prof-dir=/tmp/prof" for where its node CPU goes.
import { spawn } from 'node:child_process';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { migrate } from '../dist/db/migrate.js';
import { syncKinds } from '../dist/db/kinds.js';
import { syncRoutes } from '../dist/db/routes.js';
import { parseConfig } from '../dist/config.js';
import { createLogger } from '../dist/observability/logger.js';
import { prepareBusinessDatabases } from '../dist/worker/business-db.js';
import { startPostgres, stopAllServers, type PostgresServer } from '../test/helpers/servers.ts';
import { TEST_REDIS_URL, testKeyPrefix } from '../test/helpers/services.ts';
import { CLOSE_MANY_SQL, KIND, ORDERS_DDL, UNFINISHED_SQL, correctness, insertOrders, sleep } from './lib/orders.ts';
import { printUsage } from './lib/usage.ts';
import { drainLoop } from './lib/drain-loop.ts';
import { MINIMAL_DDL, MINIMAL_INSERT, pureSqlStatement } from './lib/limit.ts';
import {
  ActivitySampler,
  enableProfiling,
  instanceCpu,
  printShardTimeline,
  printStatements,
  processCpu,
  resetStatements,
  topStatements,
} from './lib/profile.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    rounds: { type: 'string' },
    concurrency: { type: 'string' },
    'shard-size': { type: 'string' },
    out: { type: 'string' },
    profile: { type: 'boolean', default: false },
    references: { type: 'boolean', default: false },
    baseline: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
function positive(name: string, value: string | undefined, dflt: number): number {
  if (value === undefined) return dflt;
  const n = Number(value.replace(/[_,]/g, ''));
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write(`bench:external: --${name} must be a positive integer, got "${value}"\n`);
    process.exit(2);
  }
  return n;
}
const N = positive('n', args.n, 50_000);
const ROUNDS = positive('rounds', args.rounds, 2);
const CONCURRENCY = positive('concurrency', args.concurrency, 4);
const SHARD = positive('shard-size', args['shard-size'], 1000);
const PROFILE = args.profile === true;
const REFERENCES = args.references === true;
const CLI = new URL('../dist/cli/main.js', import.meta.url).pathname;

/** What a burst needs of a build: its CLI and the steps that prepare its databases. */
interface Build {
  cli: string;
  migrate: typeof migrate;
  prepareBusinessDatabases: typeof prepareBusinessDatabases;
}
const CURRENT: Build = { cli: CLI, migrate, prepareBusinessDatabases };
async function loadBuild(dir: string): Promise<Build> {
  const dist = join(dir, 'dist');
  try {
    const m = (await import(join(dist, 'db/migrate.js'))) as { migrate: typeof migrate };
    const b = (await import(join(dist, 'worker/business-db.js'))) as { prepareBusinessDatabases: typeof prepareBusinessDatabases };
    return { cli: join(dist, 'cli/main.js'), migrate: m.migrate, prepareBusinessDatabases: b.prepareBusinessDatabases };
  } catch (err) {
    process.stderr.write(`bench:external: --baseline ${dir}: no build there (${(err as Error).message}); run npm run build in that checkout\n`);
    process.exit(2);
  }
}
const BASELINE = args.baseline === undefined ? undefined : await loadBuild(args.baseline);

interface Burst {
  path: 'same-database' | 'external' | 'external-baseline';
  round: number;
  seconds: number;
  perSecond: number;
  centerWalBytesPerTimeout: number;
  ok: boolean;
  problems: string[];
}

async function walLsn(pool: pg.Pool): Promise<bigint> {
  const { rows } = await pool.query<{ b: string }>(`SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS b`);
  return BigInt(rows[0]!.b.split('.')[0]!);
}

const WARMUP = 30;
/** The product processes of the bursts under way (one at a time). */
const running = new Set<ReturnType<typeof spawn>>();
/** The burst's due instant is this far after seeding starts: seeding, VACUUM and CHECKPOINT fit before it. */
const LEAD_MS = 3000 + N * 0.05;

/** Waits until no timeout is left in timeouts (every one done: the bench schedules no other). */
async function waitDrained(pool: pg.Pool, limitMs: number, what: string): Promise<void> {
  const started = performance.now();
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.timeouts`);
    if (rows[0]!.n === 0) return;
    if (performance.now() - started > limitMs) throw new Error(`${what}: not drained after ${Math.round(limitMs / 1000)} s`);
    await sleep(250);
  }
}

async function burst(path: Burst['path'], center: PostgresServer, business: PostgresServer, round: number): Promise<Burst> {
  const dbName = `bench_${path.replace(/-/g, '_')}_${round}`;
  const build = path === 'external-baseline' ? BASELINE! : CURRENT;
  const admin = new pg.Pool({ connectionString: center.url(), max: 1 });
  await admin.query(`CREATE DATABASE ${dbName}`);
  await admin.end();
  const centerUrl = center.url(dbName);
  const centerPool = new pg.Pool({ connectionString: centerUrl, max: 2 });
  let ordersPool = centerPool;
  let businessUrl: string | undefined;
  if (path !== 'same-database') {
    const badmin = new pg.Pool({ connectionString: business.url(), max: 1 });
    await badmin.query(`CREATE DATABASE ${dbName}`);
    await badmin.end();
    businessUrl = business.url(dbName);
    ordersPool = new pg.Pool({ connectionString: businessUrl, max: 2 });
  }
  const logger = createLogger('silent');
  await build.migrate(centerPool, logger);
  await ordersPool.query(ORDERS_DDL);
  const configInput = {
    redisKeyPrefix: testKeyPrefix(`bench-ext-${path}`),
    ...(businessUrl ? { businessDatabases: { orders: { url: businessUrl, poolSize: CONCURRENCY } } } : {}),
    kinds: { [KIND]: { shardSize: SHARD, handler: { type: 'sql' as const, sql: CLOSE_MANY_SQL, ...(businessUrl ? { database: 'orders' } : {}) } } },
    coordinator: { minTickIntervalMs: 20 },
    worker: { concurrency: CONCURRENCY, blockMs: 100 },
    logLevel: 'warn' as const,
  };
  const config = parseConfig(configInput);
  await syncKinds(centerPool, config.kinds);
  await syncRoutes(centerPool, config.kinds);
  if (businessUrl) await build.prepareBusinessDatabases({ orders: businessUrl }, logger);
  const dir = mkdtempSync(join(tmpdir(), 'tc-bench-ext-'));
  const configPath = join(dir, 'config.json');
  writeFileSync(configPath, JSON.stringify(configInput));

  // The process first, and a warm-up through both databases (leader elected, pools and prepared
  // statements warm); then the burst, due at one instant D a little ahead, seeded, vacuumed and
  // checkpointed before D (as bench:stores). Process start-up is outside the measure, for both.
  const child = spawn(process.execPath, [build.cli, 'run', '--config', configPath], {
    env: {
      ...process.env,
      NODE_OPTIONS: process.env.BENCH_CHILD_NODE_OPTIONS ?? process.env.NODE_OPTIONS ?? '',
      DATABASE_URL: centerUrl,
      REDIS_URL: TEST_REDIS_URL,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  const warm = new Date(Date.now() - 1000);
  await insertOrders(ordersPool, N + 1, N + WARMUP, warm);
  await centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, $4 FROM generate_series($2::int, $3::int) g`, [
    KIND,
    N + 1,
    N + WARMUP,
    warm,
  ]);
  await waitDrained(centerPool, 60_000, `${path}: warm-up`);
  const due = new Date(Date.now() + LEAD_MS);
  await insertOrders(ordersPool, 1, N, due);
  await centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, $3 FROM generate_series(1, $2::int) g`, [
    KIND,
    N,
    due,
  ]);
  await centerPool.query('VACUUM ANALYZE timeout_center.timeouts');
  await ordersPool.query('VACUUM ANALYZE orders');
  await centerPool.query('CHECKPOINT').catch(() => {});
  if (ordersPool !== centerPool) await ordersPool.query('CHECKPOINT').catch(() => {});
  if (Date.now() > due.getTime()) throw new Error(`${path}: seeding took past the due instant; raise LEAD_MS`);
  const walBefore = await walLsn(centerPool);
  const samplers: ActivitySampler[] = [];
  const cpuBefore = PROFILE ? [instanceCpu(center), instanceCpu(business)] : [];
  const nodeBefore = PROFILE ? processCpu(child.pid) : 0;
  if (PROFILE) {
    await resetStatements(centerPool);
    if (ordersPool !== centerPool) await resetStatements(ordersPool);
    samplers.push(new ActivitySampler(centerPool, dbName));
    if (ordersPool !== centerPool) samplers.push(new ActivitySampler(ordersPool, dbName));
    for (const s of samplers) s.start();
  }
  // Polled every 250 ms only to know when to read the end; the end itself is read at commit: the
  // commit of the last of the burst's timeouts to become final (the center's record of it; on the
  // external path the order's own close committed before that), the same for both paths.
  await waitDrained(centerPool, 600_000, path);
  const { rows: ends } = await centerPool.query<{ end: number | null; n: number }>(
    `SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)))::float8 AS end, count(*)::int AS n
       FROM timeout_center.done_timeouts WHERE due_at = $1`,
    [due],
  );
  if (ends[0]!.end === null) throw new Error('no commit timestamps: track_commit_timestamp is off on the center instance');
  if (ends[0]!.n !== N) throw new Error(`${path}: ${ends[0]!.n} of ${N} timeouts of the burst are done`);
  const seconds = ends[0]!.end - due.getTime() / 1000;
  const walAfter = await walLsn(centerPool);
  if (PROFILE) {
    const nodeCpu = processCpu(child.pid) - nodeBefore;
    const cpu = [instanceCpu(center) - cpuBefore[0]!, instanceCpu(business) - cpuBefore[1]!];
    const activity = await Promise.all(samplers.map((s) => s.stop()));
    console.log(
      `profile round ${round} ${path}: ${seconds.toFixed(2)} s from D to the last commit; CPU s: node ${nodeCpu.toFixed(2)}, center instance ${cpu[0]!.toFixed(2)}, business instance ${cpu[1]!.toFixed(2)}`,
    );
    console.log(`  center backends (average number in each state): ${JSON.stringify(activity[0])}`);
    if (activity[1]) console.log(`  business backends: ${JSON.stringify(activity[1])}`);
    printStatements('center statements', await topStatements(centerPool, 'center'));
    if (ordersPool !== centerPool) printStatements('business statements', await topStatements(ordersPool, 'business'));
    await printShardTimeline(centerPool, due);
  }
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  const c = await correctness(ordersPool, undefined);
  if (ordersPool !== centerPool) await ordersPool.end();
  await centerPool.end();
  return {
    path,
    round,
    seconds,
    perSecond: N / seconds,
    centerWalBytesPerTimeout: Number(walAfter - walBefore) / N,
    ok: c.ok,
    problems: c.problems,
  };
}

type ReferenceShape = 'sql-one-database' | 'sql-two-databases' | 'sql-two-databases-noted' | 'sql-two-databases-prepared';
const SHAPES: readonly ReferenceShape[] = ['sql-one-database', 'sql-two-databases', 'sql-two-databases-noted', 'sql-two-databases-prepared'];
/** Prepared transactions the center instance allows (sql-two-databases-prepared: one per connection). */
const MAX_PREPARED = 64;
let preparedSeq = 0;

/** A physical reference (--references): N minimal timeouts due now, drained by CONCURRENCY
 *  connections looping one transaction of SHARD rows each until one finds nothing; the time is
 *  the loop's, ending at the last commit. */
async function reference(shape: ReferenceShape, center: PostgresServer, business: PostgresServer, round: number): Promise<number> {
  const dbName = `bench_${shape.replace(/-/g, '_')}_${round}`;
  const servers = shape === 'sql-one-database' ? [center] : [center, business];
  for (const server of servers) {
    const admin = new pg.Pool({ connectionString: server.url(), max: 1 });
    await admin.query(`CREATE DATABASE ${dbName}`);
    await admin.end();
  }
  const centerPool = new pg.Pool({ connectionString: center.url(dbName), max: CONCURRENCY });
  const ordersPool = shape === 'sql-one-database' ? centerPool : new pg.Pool({ connectionString: business.url(dbName), max: CONCURRENCY });
  await centerPool.query(MINIMAL_DDL);
  await ordersPool.query(ORDERS_DDL);
  const due = new Date(Date.now() - 1000);
  await insertOrders(ordersPool, 1, N, due);
  await centerPool.query(MINIMAL_INSERT, [1, N, due]);
  await centerPool.query('VACUUM ANALYZE timeouts');
  await ordersPool.query('VACUUM ANALYZE orders');
  await centerPool.query('CHECKPOINT');
  if (ordersPool !== centerPool) await ordersPool.query('CHECKPOINT');
  const oneStatement = pureSqlStatement('array', KIND, 'minimal');
  const claim = `UPDATE timeouts t SET state = 'done'
                  WHERE t.id = ANY (ARRAY(SELECT id FROM timeouts WHERE state = 'pending' AND due_at <= now() ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED))
                 RETURNING t.id, t.biz_id`;
  // sql-two-databases-noted: the business transaction also notes which timeouts it ran (one row
  // each, deleted once the center committed): what would let a run after a crash between the two
  // commits record what an earlier run did, with the center's locks held across the call.
  if (shape === 'sql-two-databases-noted') await ordersPool.query('CREATE TABLE ran (timeout_id bigint PRIMARY KEY)');
  // sql-two-databases-prepared: the center's transaction (lock and mark) is PREPAREd before the
  // business COMMIT and committed after it (two-phase commit, the business database's decision row
  // as the log): a run that dies between the two commits leaves a prepared transaction that the
  // next run commits if the decision row is there and rolls back if not. Exact without a note per
  // timeout, one decision row per batch; needs max_prepared_transactions on the center.
  if (shape === 'sql-two-databases-prepared') await ordersPool.query('CREATE TABLE decided (gid text PRIMARY KEY)');
  const business_ = shape === 'sql-one-database' ? [] : await Promise.all(Array.from({ length: CONCURRENCY }, () => ordersPool.connect()));
  let next = 0;
  const { total, seconds } = await drainLoop(centerPool, CONCURRENCY, async (client) => {
    if (shape === 'sql-one-database') return (await client.query<{ n: number }>(oneStatement, [SHARD])).rows[0]!.n;
    const b = business_[next++ % business_.length]!;
    await client.query('BEGIN');
    const { rows } = await client.query<{ id: string; biz_id: string }>(claim, [SHARD]);
    const ids = rows.map((r) => r.id);
    if (rows.length > 0 && shape === 'sql-two-databases') await b.query(CLOSE_MANY_SQL, [rows.map((r) => r.biz_id)]);
    if (rows.length > 0 && shape === 'sql-two-databases-noted') {
      await b.query('BEGIN');
      await b.query('INSERT INTO ran (timeout_id) SELECT unnest($1::bigint[])', [ids]);
      await b.query(CLOSE_MANY_SQL, [rows.map((r) => r.biz_id)]);
      await b.query('COMMIT');
    }
    if (rows.length > 0 && shape === 'sql-two-databases-prepared') {
      const gid = `bench-${round}-${(preparedSeq += 1)}`;
      await b.query('BEGIN');
      await b.query('INSERT INTO decided (gid) VALUES ($1)', [gid]);
      await b.query(CLOSE_MANY_SQL, [rows.map((r) => r.biz_id)]);
      await client.query(`PREPARE TRANSACTION '${gid}'`);
      await b.query('COMMIT');
      await client.query(`COMMIT PREPARED '${gid}'`);
      await b.query('DELETE FROM decided WHERE gid = $1', [gid]);
      return rows.length;
    }
    await client.query('COMMIT');
    if (rows.length > 0 && shape === 'sql-two-databases-noted') await b.query('DELETE FROM ran WHERE timeout_id = ANY ($1::bigint[])', [ids]);
    return rows.length;
  });
  for (const b of business_) b.release();
  const c = await correctness(ordersPool, shape === 'sql-one-database' ? 'minimal' : undefined);
  const left = (await centerPool.query<{ n: number }>(UNFINISHED_SQL.minimal)).rows[0]!.n;
  if (total !== N || !c.ok || left > 0) throw new Error(`${shape}: drained ${total} of ${N}, ${left} left; ${c.problems.join('; ')}`);
  if (ordersPool !== centerPool) await ordersPool.end();
  await centerPool.end();
  return N / seconds;
}

// The center records each timeout's end at commit (pg_xact_commit_timestamp): track_commit_timestamp.
// max_prepared_transactions, as deploy's PostgreSQL (docker-compose.yml): the external path's first
// runs commit in two phases (src/worker/two-phase.ts), and the sql-two-databases-prepared reference
// (--references) needs it. A --baseline checkout from before issue 32's seventh pass commits first.
const center = await startPostgres({ settings: { track_commit_timestamp: 'on', max_prepared_transactions: String(MAX_PREPARED) } });
const business = await startPostgres();
if (PROFILE) await Promise.all([enableProfiling(center), enableProfiling(business)]);
const results: Burst[] = [];
const referenceRuns: { shape: ReferenceShape; round: number; perSecond: number }[] = [];
try {
  for (let round = 1; round <= ROUNDS; round += 1) {
    const paths: Burst['path'][] = BASELINE ? ['same-database', 'external', 'external-baseline'] : ['same-database', 'external'];
    for (const path of round % 2 ? paths : [...paths].reverse()) {
      const r = await burst(path, center, business, round);
      results.push(r);
      console.log(
        `round ${round} ${path.padEnd(17)} ${N} timeouts in ${r.seconds.toFixed(2)} s = ${Math.round(r.perSecond)}/s, center WAL ${Math.round(r.centerWalBytesPerTimeout)} B/timeout${r.ok ? '' : ` PROBLEMS: ${r.problems.join('; ')}`}`,
      );
    }
    if (!REFERENCES) continue;
    for (const shape of round % 2 ? SHAPES : [...SHAPES].reverse()) {
      const perSecond = await reference(shape, center, business, round);
      referenceRuns.push({ shape, round, perSecond });
      console.log(`round ${round} ${shape.padEnd(23)} ${N} timeouts at ${Math.round(perSecond)}/s`);
    }
  }
} catch (err) {
  // Said before the servers stop: their pools' idle clients fail then, and end the process first.
  console.error('bench:external failed:', err);
  throw err;
} finally {
  // A burst that failed leaves its `timeout-center run` process: stopped with the servers, not left
  // retrying against them.
  for (const child of running) child.kill('SIGKILL');
  await stopAllServers();
}
const best = (path: Burst['path']) => results.filter((r) => r.path === path).sort((a, b) => b.perSecond - a.perSecond)[0]!;
const same = best('same-database');
const ext = best('external');
const median = (path: Burst['path']) => {
  const s = results
    .filter((r) => r.path === path)
    .map((r) => r.perSecond)
    .sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
// Round by round: the bursts of a round ran minutes apart on the same box.
const inRound = (path: Burst['path'], round: number) => results.find((r) => r.path === path && r.round === round)!;
const perRoundOf = (a: Burst['path'], b: Burst['path']) =>
  Array.from({ length: ROUNDS }, (_, i) => Number((inRound(a, i + 1).perSecond / inRound(b, i + 1).perSecond).toFixed(2)));
const perRound = perRoundOf('external', 'same-database');
const summary = {
  n: N,
  rounds: ROUNDS,
  concurrency: CONCURRENCY,
  shardSize: SHARD,
  sameDatabasePerSecond: Math.round(same.perSecond),
  externalPerSecond: Math.round(ext.perSecond),
  ratio: Number((ext.perSecond / same.perSecond).toFixed(2)),
  medianSameDatabasePerSecond: Math.round(median('same-database')),
  medianExternalPerSecond: Math.round(median('external')),
  medianRatio: Number((median('external') / median('same-database')).toFixed(2)),
  perRoundRatio: perRound,
  extraMicrosecondsPerTimeout: Math.round((1e6 / ext.perSecond - 1e6 / same.perSecond) * 10) / 10,
  sameDatabaseCenterWalBytesPerTimeout: Math.round(same.centerWalBytesPerTimeout),
  externalCenterWalBytesPerTimeout: Math.round(ext.centerWalBytesPerTimeout),
  allCorrect: results.every((r) => r.ok),
  runs: results,
};
console.log(
  `best: same database ${summary.sameDatabasePerSecond}/s, external ${summary.externalPerSecond}/s (${summary.ratio}x); ` +
    `the external path costs ${summary.extraMicrosecondsPerTimeout} µs more per timeout of wall time on this box, and the center writes ` +
    `${summary.externalCenterWalBytesPerTimeout} B of WAL per timeout instead of ${summary.sameDatabaseCenterWalBytesPerTimeout} B on the same-database path`,
);
console.log(
  `median of ${ROUNDS} rounds: same database ${summary.medianSameDatabasePerSecond}/s, external ${summary.medianExternalPerSecond}/s (${summary.medianRatio}x; per round ${perRound.join(', ')})`,
);
let baselineSummary: Record<string, unknown> | undefined;
if (BASELINE) {
  const against = perRoundOf('external', 'external-baseline');
  baselineSummary = {
    dir: args.baseline,
    medianBaselinePerSecond: Math.round(median('external-baseline')),
    medianBaselineRatio: Number((median('external-baseline') / median('same-database')).toFixed(2)),
    perRoundBaselineRatio: perRoundOf('external-baseline', 'same-database'),
    medianExternalAgainstBaseline: Number((median('external') / median('external-baseline')).toFixed(2)),
    perRoundExternalAgainstBaseline: against,
  };
  console.log(
    `baseline (${args.baseline}), median of ${ROUNDS} rounds: external-baseline ${baselineSummary.medianBaselinePerSecond}/s ` +
      `(${baselineSummary.medianBaselineRatio}x the same-database path; per round ${(baselineSummary.perRoundBaselineRatio as number[]).join(', ')}); ` +
      `external against it ${baselineSummary.medianExternalAgainstBaseline}x (per round ${against.join(', ')})`,
  );
}
let referenceSummary: Record<string, unknown> | undefined;
if (REFERENCES) {
  const rates = (shape: ReferenceShape) => referenceRuns.filter((r) => r.shape === shape).map((r) => r.perSecond);
  const med = (xs: number[]) => {
    const v = [...xs].sort((a, b) => a - b);
    return v.length % 2 ? v[(v.length - 1) >> 1]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2;
  };
  const one = med(rates('sql-one-database'));
  const two = med(rates('sql-two-databases'));
  const noted = med(rates('sql-two-databases-noted'));
  const prepared = med(rates('sql-two-databases-prepared'));
  const perRoundRef = Array.from({ length: ROUNDS }, (_, i) => {
    const r = referenceRuns.filter((x) => x.round === i + 1);
    const o = r.find((x) => x.shape === 'sql-one-database')!.perSecond;
    const t = r.find((x) => x.shape === 'sql-two-databases')!.perSecond;
    return Number((t / o).toFixed(2));
  });
  referenceSummary = {
    medianSqlOneDatabasePerSecond: Math.round(one),
    medianSqlTwoDatabasesPerSecond: Math.round(two),
    medianRatio: Number((two / one).toFixed(2)),
    medianSqlTwoDatabasesNotedPerSecond: Math.round(noted),
    medianNotedRatio: Number((noted / one).toFixed(2)),
    medianSqlTwoDatabasesPreparedPerSecond: Math.round(prepared),
    medianPreparedRatio: Number((prepared / one).toFixed(2)),
    perRoundRatio: perRoundRef,
    sameDatabaseAgainstItsReference: Number((median('same-database') / one).toFixed(2)),
    externalAgainstItsReference: Number((median('external') / two).toFixed(2)),
  };
  console.log(
    `references, median of ${ROUNDS} rounds: sql-one-database ${Math.round(one)}/s, sql-two-databases ${Math.round(two)}/s ` +
      `(${referenceSummary.medianRatio}x; per round ${perRoundRef.join(', ')}): at best a two-database path reaches that ratio on this box; ` +
      `with a note per timeout in the business transaction ${Math.round(noted)}/s (${referenceSummary.medianNotedRatio}x); ` +
      `with the center's transaction prepared across the business commit ${Math.round(prepared)}/s (${referenceSummary.medianPreparedRatio}x); ` +
      `same-database path ${referenceSummary.sameDatabaseAgainstItsReference}x its reference, external path ${referenceSummary.externalAgainstItsReference}x its reference`,
  );
}
if (args.out) writeFileSync(args.out, JSON.stringify({ ...summary, baseline: baselineSummary, references: referenceSummary, referenceRuns }, null, 2));
if (!summary.allCorrect) process.exit(1);
