// npm run bench:horizon [-- options]: a steady stream of timeouts for a given time while another
// connection holds an old snapshot for most of it (issue 45, docs/vacuum-horizon-figures.md).
// While the snapshot lives, VACUUM can remove no timeout deleted after it was taken: what a
// report in REPEATABLE READ, a pg_dump, a lagging logical slot or hot_standby_feedback does to
// a production database. Reported per window (30 s): lateness p50/p99 of the stream's timeouts
// due in the window (at commit: pg_xact_commit_timestamp of the closed order, as bench/run.ts),
// dead and live rows of timeout_center.timeouts (pg_stat_user_tables), its heap and index sizes,
// whether the snapshot was held, and the box's load. Bursts of --burst-n timeouts fall due at the
// given times, some while the snapshot is held and some not, and each one's drain rate (unpaid
// orders / (last close's commit - due instant)) is reported.
//
// The bench starts its own PostgreSQL (bench/lib/server.ts: durable commits, autovacuum as
// shipped, track_commit_timestamp on; max_prepared_transactions 64, as bench:external's center
// and docker-compose.yml, so that `external` runs in two phases). Each variant gets its own
// database(s) on it and one `timeout-center run` process (coordinator + worker, the product's
// defaults); variants run side by side, on the same server, in the same seconds, so they share
// the box's load:
//   center    the kind's timeouts in the center's database with its orders (same-database path)
//   store     the kind stored beside its orders (`store: beside`, `handler.database`): its
//             timeouts and orders in a store database, the center holding none
//   external  the external path (bench:external's setup): the kind's timeouts in the center's
//             database, its orders in a business database on the same server (`businessDatabases`,
//             `handler.database`); the stream schedules first, then writes the orders
//   ref       `center` run by another build (--ref <checkout>: its dist/cli/main.js), e.g. the
//             code before the claim floors, for an A/B in one run
// The snapshot is held in each database holding timeouts (a snapshot in another database of the
// cluster does not hold back a table's vacuum; a replication slot does, cluster-wide); for
// `external` a second one is held in the business database, which keeps the orders' (and the
// marker table's) dead versions. Its lateness is read in the business database, where the orders
// are; its dead rows and sizes are the center's timeouts table, as for the others.
//
//   --duration <s>       the stream's length (default 900)
//   --rate <per s>       timeouts per second (default 2000), due --delay s after insert (default 1)
//   --snapshot <a:b>     hold the snapshot from second a to second b (default 120:720)
//   --bursts <s,...>     seconds at which a burst falls due (default 60,540,840; none: -)
//   --burst-n <n>        timeouts per burst (default 200,000)
//   --window <s>         window length (default 30)
//   --variants <v,...>   center, store, external, ref (default center,store)
//   --ref <checkout>     the build run as variant ref
//   --out <file>         the raw JSON (default docs/bench/horizon-<date>.json)
//   --report <file>      print the table of a raw JSON written earlier, and run nothing
//   --help               this text
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { TEST_REDIS_URL, testKeyPrefix } from '../test/helpers/services.ts';
import { CLOSE_MANY_SQL, KIND, ORDERS_DDL, UNFINISHED_SQL, correctness, insertOrders, sleep, type Correctness } from './lib/orders.ts';
import { printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string' },
    rate: { type: 'string' },
    delay: { type: 'string' },
    snapshot: { type: 'string' },
    bursts: { type: 'string' },
    'burst-n': { type: 'string' },
    window: { type: 'string' },
    variants: { type: 'string' },
    ref: { type: 'string' },
    out: { type: 'string' },
    report: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v.replace(/_/g, '')));
const DURATION = num(args.duration, 900);
const RATE = num(args.rate, 2000);
const DELAY = num(args.delay, 1);
const [SNAP_FROM, SNAP_TO] = (args.snapshot ?? '120:720').split(':').map(Number) as [number, number];
const BURSTS = args.bursts === '-' ? [] : (args.bursts ?? '60,540,840').split(',').map(Number);
const BURST_N = num(args['burst-n'], 200_000);
const WINDOW = num(args.window, 30);
const VARIANTS = (args.variants ?? 'center,store').split(',').map((s) => s.trim()) as VariantName[];
/** Seconds before its due instant a burst is written (200,000 orders and timeouts: a few seconds). */
const BURST_LEAD = 20;
const ROOT = new URL('..', import.meta.url).pathname;
const CLI = join(ROOT, 'dist/cli/main.js');
const VARIANT_NAMES = ['center', 'store', 'external', 'ref'] as const;
type VariantName = (typeof VARIANT_NAMES)[number];
for (const v of VARIANTS) if (!VARIANT_NAMES.includes(v)) throw new Error(`--variants takes ${VARIANT_NAMES.join(', ')}; got ${v}`);
if (VARIANTS.includes('ref') && !args.ref) throw new Error('--variants ref needs --ref <checkout> (a build: its dist/cli/main.js)');

interface Variant {
  name: VariantName;
  /** where the kind's timeouts are */
  pool: pg.Pool;
  url: string;
  /** where the orders are: the same pool and URL but for `external` */
  orders: pg.Pool;
  ordersUrl: string;
  child?: ChildProcess;
  /** the snapshots held now: one per database of the variant */
  holders: pg.Client[];
  /** steady orders written: ids 1..next-1 */
  next: number;
}

interface Sample {
  t: number;
  variant: VariantName;
  snapshot: boolean;
  live: number;
  dead: number;
  heapBytes: number;
  indexBytes: number;
  autovacuums: number;
  load1: number;
}

const quiet = (url: string, max = 3) => {
  const p = new pg.Pool({ connectionString: url, max, application_name: 'tc-bench' });
  p.on('error', () => {});
  return p;
};

function runCli(cli: string, argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...argv], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`timeout-center ${argv[0]} exited ${code}: ${err.slice(-2000)}`))));
  });
}

const burstBase = (b: number) => 1_000_000_000 + b * 10_000_000;

/** Orders [from, to] (every 10th paid), each with its timeout due at `due`: in one statement where
 *  both live in one database, else the timeouts first, then the orders (DESIGN "Scheduling from
 *  elsewhere"). */
async function write(timeouts: pg.Pool, orders: pg.Pool, from: number, to: number, due: Date): Promise<void> {
  if (timeouts === orders) {
    await timeouts.query(
      `WITH o AS (INSERT INTO orders (id, status, due_at)
                  SELECT i, CASE WHEN i % 10 = 0 THEN 'paid' ELSE 'unpaid' END, $3 FROM generate_series($1::bigint, $2::bigint) i RETURNING id)
       INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $4, id::text, $3 FROM o`,
      [from, to, due, KIND],
    );
    return;
  }
  await timeouts.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $4, i::text, $3 FROM generate_series($1::bigint, $2::bigint) i`, [
    from,
    to,
    due,
    KIND,
  ]);
  await insertOrders(orders, from, to, due);
}

async function setUp(server: BenchServer, name: VariantName): Promise<Variant> {
  const center = await server.createDatabase(`horizon_${name}`);
  // store: the kind's timeouts and orders in s0; external: its orders alone in b0
  const db = name === 'store' ? 's0' : 'b0';
  const other = name === 'store' || name === 'external' ? await server.createDatabase(`horizon_${name}_${db}`) : undefined;
  const url = name === 'store' ? other!.url : center.url;
  const ordersUrl = other?.url ?? center.url;
  const pool = quiet(url);
  const orders = ordersUrl === url ? pool : quiet(ordersUrl);
  await orders.query(ORDERS_DDL);
  const handler = { type: 'sql', sql: CLOSE_MANY_SQL, ...(other ? { database: db } : {}) };
  const config = {
    redisKeyPrefix: testKeyPrefix(`bench-horizon-${name}`),
    ...(other ? { businessDatabases: { [db]: { url: other.url } } } : {}),
    kinds: { [KIND]: name === 'store' ? { store: 'beside', handler } : { handler } },
    alerts: { lagSlaMs: 3_600_000 },
    logLevel: 'warn',
  };
  const configPath = join(mkdtempSync(join(tmpdir(), 'tc-bench-horizon-')), 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const cli = name === 'ref' ? join(args.ref!, 'dist/cli/main.js') : CLI;
  if (!existsSync(cli)) throw new Error(`${cli}: no build there; run npm run build in that checkout`);
  const env = { ...process.env, DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL };
  await runCli(cli, ['migrate', '--config', configPath], env);
  const child = spawn(process.execPath, [cli, 'run', '--config', configPath], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  const v: Variant = { name, pool, url, orders, ordersUrl, child, holders: [], next: 1 };
  // Warm-up: a few orders due now, drained (leader elected, worker up).
  await write(pool, orders, 900_000_000, 900_000_029, new Date(Date.now() - 1000));
  const began = Date.now();
  while ((await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE state = 'pending'")).rows[0]!.n > 0) {
    if (Date.now() - began > 60_000) throw new Error(`${name}: warm-up not drained after 60 s`);
    await sleep(100);
  }
  return v;
}

async function sample(v: Variant, t: number): Promise<Sample> {
  const { rows } = await v.pool.query<{ live: number; dead: number; heap: number; idx: number; av: number }>(
    `SELECT s.n_live_tup::float8 AS live, s.n_dead_tup::float8 AS dead, s.autovacuum_count::float8 AS av,
            pg_table_size('timeout_center.timeouts')::float8 AS heap, pg_indexes_size('timeout_center.timeouts')::float8 AS idx
       FROM pg_stat_user_tables s WHERE s.relid = 'timeout_center.timeouts'::regclass`,
  );
  const r = rows[0]!;
  return {
    t,
    variant: v.name,
    snapshot: v.holders.length > 0,
    live: r.live,
    dead: r.dead,
    heapBytes: r.heap,
    indexBytes: r.idx,
    autovacuums: r.av,
    load1: loadavg()[0]!,
  };
}

interface WindowLateness {
  window: number;
  n: number;
  p50: number;
  p99: number;
  max: number;
}

/** Lateness (ms) of the stream's orders (not the bursts'), by the window their due time falls in. */
async function windowLateness(v: Variant, t0: Date): Promise<WindowLateness[]> {
  const { rows } = await v.orders.query<WindowLateness>(
    `SELECT w AS window, count(*)::int AS n,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY l)::float8 AS p50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY l)::float8 AS p99, max(l)::float8 AS max
       FROM (SELECT floor(extract(epoch FROM o.due_at - $1::timestamptz) / $2)::int AS w,
                    extract(epoch FROM pg_xact_commit_timestamp(o.xmin) - o.due_at) * 1000 AS l
               FROM orders o WHERE o.id < 900000000 AND o.status = 'closed') x
      GROUP BY w ORDER BY w`,
    [t0, WINDOW],
  );
  return rows;
}

interface BurstResult {
  variant: VariantName;
  at: number;
  snapshot: boolean;
  unpaid: number;
  closed: number;
  seconds: number;
  perSecond: number;
  p99Ms: number;
  /** seconds from the burst's write committing to its due instant (negative: written after it was due) */
  writtenAheadS?: number;
}

async function burstResult(v: Variant, b: number, at: number, due: Date, snapshot: boolean, writtenAt: number | undefined): Promise<BurstResult> {
  const { rows } = await v.orders.query<{ unpaid: number; closed: number; last: number; p99: number }>(
    `SELECT count(*) FILTER (WHERE id % 10 <> 0)::int AS unpaid, count(*) FILTER (WHERE status = 'closed')::int AS closed,
            extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) FILTER (WHERE status = 'closed') - $3::timestamptz)::float8 AS last,
            (percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - due_at)) FILTER (WHERE status = 'closed') * 1000)::float8 AS p99
       FROM orders WHERE id BETWEEN $1 AND $2`,
    [burstBase(b), burstBase(b) + BURST_N - 1, due],
  );
  const r = rows[0]!;
  const writtenAheadS = writtenAt === undefined ? undefined : (due.getTime() - writtenAt) / 1000;
  return { variant: v.name, at, snapshot, unpaid: r.unpaid, closed: r.closed, seconds: r.last, perSecond: r.unpaid / r.last, p99Ms: r.p99, writtenAheadS };
}

const mb = (b: number) => (b / 1024 / 1024).toFixed(0);

async function main(): Promise<void> {
  const server = await startBenchServer({ walWarmupBytes: 0, settings: { max_prepared_transactions: '64' } });
  const variants: Variant[] = [];
  const samples: Sample[] = [];
  const bursts: { b: number; at: number; due: Date; snapshot: boolean }[] = [];
  // when each burst's write committed, by variant and burst: a write still running at the due
  // instant would count its own time as drain time
  const writtenAt = new Map<string, number>();
  try {
    for (const name of VARIANTS) variants.push(await setUp(server, name));
    const start = Date.now();
    const t0 = new Date(start);
    const elapsed = () => (Date.now() - start) / 1000;
    let sampling = true;
    const sampler = (async () => {
      let w = 0;
      while (sampling) {
        for (const v of variants) samples.push(await sample(v, Math.round(elapsed())));
        const last = samples.slice(-variants.length);
        process.stderr.write(
          `${elapsed().toFixed(0)} s  load ${loadavg()[0]!.toFixed(2)}  ` +
            last
              .map((s) => `${s.variant}: dead ${s.dead} live ${s.live} heap ${mb(s.heapBytes)} MB idx ${mb(s.indexBytes)} MB${s.snapshot ? ' [snapshot]' : ''}`)
              .join(' | ') +
            '\n',
        );
        w += 1;
        await sleep(Math.max(0, start + w * WINDOW * 1000 - Date.now()));
      }
    })();
    const burstWrites: Promise<void>[] = [];
    const pendingBursts = BURSTS.map((at, b) => ({ at, b })).sort((x, y) => x.at - y.at);
    while (elapsed() < DURATION) {
      const t = elapsed();
      // the snapshot: begun, one row read (the snapshot is taken), then nothing until released
      if (t >= SNAP_FROM && t < SNAP_TO && variants[0]!.holders.length === 0) {
        for (const v of variants) {
          for (const url of new Set([v.url, v.ordersUrl])) {
            const c = new pg.Client({ connectionString: url, application_name: 'tc-bench snapshot' });
            c.on('error', () => {});
            await c.connect();
            await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
            // one row read: the snapshot is taken (the center of `external` has no orders table)
            await c.query(url === v.ordersUrl ? 'SELECT id FROM orders LIMIT 1' : 'SELECT kind FROM timeout_center.kinds LIMIT 1');
            v.holders.push(c);
          }
        }
        process.stderr.write(`${t.toFixed(0)} s  snapshot taken\n`);
      }
      if (t >= SNAP_TO && variants[0]!.holders.length > 0) {
        for (const v of variants) {
          for (const c of v.holders) {
            await c.query('COMMIT').catch(() => {});
            await c.end().catch(() => {});
          }
          v.holders = [];
        }
        process.stderr.write(`${t.toFixed(0)} s  snapshot released\n`);
      }
      while (pendingBursts.length > 0 && t >= pendingBursts[0]!.at - BURST_LEAD) {
        const { at, b } = pendingBursts.shift()!;
        const due = new Date(start + at * 1000);
        bursts.push({ b, at, due, snapshot: at >= SNAP_FROM && at < SNAP_TO });
        process.stderr.write(`${t.toFixed(0)} s  writing burst ${b + 1} (${BURST_N}, due at ${at} s)\n`);
        for (const v of variants) {
          const p = quiet(v.url, 1);
          const o = v.ordersUrl === v.url ? p : quiet(v.ordersUrl, 1);
          burstWrites.push(
            write(p, o, burstBase(b), burstBase(b) + BURST_N - 1, due)
              .then(() => void writtenAt.set(`${v.name}:${b}`, Date.now()))
              .finally(() => Promise.all([p.end(), o !== p && o.end()])),
          );
        }
      }
      const target = Math.floor(RATE * t);
      await Promise.all(
        variants.map(async (v) => {
          if (target >= v.next) {
            await write(v.pool, v.orders, v.next, target, new Date(Date.now() + DELAY * 1000));
            v.next = target + 1;
          }
        }),
      );
      await sleep(100 - ((Date.now() - start) % 100));
    }
    await Promise.all(burstWrites);
    for (const v of variants) for (const c of v.holders.splice(0)) await c.end().catch(() => {});
    // drained: every timeout final
    const deadline = Date.now() + 300_000;
    for (const v of variants) {
      while (
        (await v.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE state IN ('pending', 'dispatched')")).rows[0]!.n > 0
      ) {
        if (Date.now() > deadline) throw new Error(`${v.name}: not drained 5 minutes after the stream ended`);
        await sleep(500);
      }
    }
    sampling = false;
    await sampler;
    const lateness = Object.fromEntries(await Promise.all(variants.map(async (v) => [v.name, await windowLateness(v, t0)] as const)));
    const burstResults = (
      await Promise.all(variants.flatMap((v) => bursts.map((b) => burstResult(v, b.b, b.at, b.due, b.snapshot, writtenAt.get(`${v.name}:${b.b}`)))))
    ).sort((a, b) => a.at - b.at || a.variant.localeCompare(b.variant));
    const checks = Object.fromEntries(await Promise.all(variants.map(async (v) => [v.name, await check(v)] as const)));
    const meta = {
      date: new Date().toISOString(),
      commit: gitCommit(),
      args: process.argv.slice(2),
      duration: DURATION,
      rate: RATE,
      delay: DELAY,
      snapshot: [SNAP_FROM, SNAP_TO],
      bursts: BURSTS,
      burstN: BURST_N,
      window: WINDOW,
      variants: VARIANTS,
      ref: args.ref ?? null,
      postgres: server.settings,
    };
    const raw = { meta, samples, lateness, bursts: burstResults, correctness: checks };
    const out = args.out ?? join(ROOT, 'docs', 'bench', `horizon-${meta.date.slice(0, 16).replace(/[:T]/g, '-')}.json`);
    writeFileSync(out, JSON.stringify(raw, null, 1) + '\n');
    process.stdout.write(report(raw) + `\nwrote ${out}\n`);
  } finally {
    for (const v of variants) {
      v.child?.kill('SIGTERM');
      for (const c of v.holders) await c.end().catch(() => {});
      await v.pool.end().catch(() => {});
      if (v.orders !== v.pool) await v.orders.end().catch(() => {});
    }
    await sleep(1000);
    await server.stop();
  }
}

/** The orders closed exactly once, paid ones untouched, in the orders' database; every due timeout
 *  final, in the timeouts' database. */
async function check(v: Variant): Promise<Correctness> {
  const c = await correctness(v.orders, undefined);
  const n = (await v.pool.query<{ n: number }>(UNFINISHED_SQL.ours)).rows[0]!.n;
  c.timeoutsNotFinal = n;
  if (n > 0) c.problems.unshift(`${n} due timeouts not final`);
  c.ok = c.problems.length === 0;
  return c;
}

function gitCommit(): string {
  try {
    return execFileSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    return '?';
  }
}

/** The printed table: one line per window and variant, then the bursts. Samples come in rounds,
 *  one per variant; a window runs from one round to the next. */
export function report(raw: {
  samples: Sample[];
  lateness: Record<string, WindowLateness[]>;
  bursts: BurstResult[];
  correctness: Record<string, { ok: boolean; problems: string[] }>;
  meta: { window: number; variants: string[]; snapshot: number[] };
}): string {
  const lines: string[] = [];
  lines.push('window (s)   variant   snapshot  lateness p50/p99 (ms)  dead rows  live rows  heap/indexes (MB)  load');
  const n = raw.meta.variants.length;
  const rounds: Sample[][] = [];
  for (let i = 0; i + n <= raw.samples.length; i += n) rounds.push(raw.samples.slice(i, i + n));
  for (let i = 1; i < rounds.length; i++) {
    const from = rounds[i - 1]![0]!.t;
    const to = rounds[i]![0]!.t;
    const w = Math.round(from / raw.meta.window);
    // held: the window lies within the snapshot's seconds (a sample's own flag races the taking and
    // the release, which happen at a window's edge)
    for (const s of rounds[i]!) {
      const l = raw.lateness[s.variant]?.find((x) => x.window === w);
      lines.push(
        `${String(from).padStart(5)}-${String(to).padEnd(5)}  ${s.variant.padEnd(8)}  ${(from >= raw.meta.snapshot[0]! && to <= raw.meta.snapshot[1]! ? 'held' : '').padEnd(8)}  ${(l ? `${l.p50.toFixed(0)}/${l.p99.toFixed(0)}` : '-').padStart(21)}  ${String(s.dead).padStart(9)}  ${String(s.live).padStart(9)}  ${`${mb(s.heapBytes)}/${mb(s.indexBytes)}`.padStart(17)}  ${s.load1.toFixed(2)}`,
      );
    }
  }
  lines.push('');
  lines.push('burst due at (s)  variant   snapshot  drained in (s)  per second  lateness p99 (ms)  written (s before due)');
  for (const b of raw.bursts)
    lines.push(
      `${String(b.at).padStart(16)}  ${b.variant.padEnd(8)}  ${(b.snapshot ? 'held' : '').padEnd(8)}  ${b.seconds.toFixed(2).padStart(14)}  ${Math.round(b.perSecond).toString().padStart(10)}  ${b.p99Ms.toFixed(0).padStart(17)}  ${(b.writtenAheadS === undefined ? '-' : b.writtenAheadS.toFixed(1)).padStart(22)}`,
    );
  lines.push('');
  for (const [v, c] of Object.entries(raw.correctness)) lines.push(`${v}: ${c.ok ? 'correct' : c.problems.join('; ')}`);
  return lines.join('\n');
}

if (args.report) {
  process.stdout.write(report(JSON.parse(readFileSync(args.report, 'utf8'))) + '\n');
  process.exit(0);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench:horizon failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
