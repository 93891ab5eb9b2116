// npm run bench:tracing [-- options]: what tracing costs the drain (issue 33: "off unless
// configured, and then no measurable cost"). The same burst (bench/lib/workloads.ts burst(): --n
// orders with their timeouts due at one instant, the product's defaults, the same-database SQL
// handler, one coordinator and one worker process, the end time read at commit) drained by:
//
//   ref-*   the engine before tracing, built from git in a temporary worktree under /tmp (its
//           node_modules a symlink to this checkout's) and run from its dist/:
//             ref-before  the parent of the first commit that created src/observability/tracing.ts
//                         or sql/0022_trace_context.sql (the commit before tracing existed; on the
//                         branch tracing was written on, so it lacks main's other work since);
//             ref-main    main just before the merge that brought tracing in (the first parent of
//                         the first first-parent commit that has tracing.ts): the same engine with
//                         everything merged before it, the closest reference to this build;
//   off     this build, no OTEL_* variable (every OTEL_* of the bench's own environment removed);
//   on      this build with OTEL_TRACES_EXPORTER=otlp and OTEL_EXPORTER_OTLP_ENDPOINT at a sink
//           in this process that accepts each OTLP/HTTP export, counts its spans and discards
//           it (the SDK's defaults otherwise: batch processor, JSON over HTTP).
//
// Rounds are interleaved (each round runs every variant once, the order rotated each round, so
// no variant always runs first or after the same one); each variant is reported by its median
// round, and the ratios are of medians taken in this one run. Besides the drain rate, the CPU
// seconds the engine's processes and PostgreSQL's backends spent from the due instant to the end
// of the drain: less sensitive to the other jobs on a shared box than a wall-clock rate.
//
// Then the one statement tracing changed on this path, alone: claim.sql's batch form (claim + SQL
// handler + the move to history, one statement per shard; this build's returns the rows' distinct
// trace contexts too) as the reference builds it (its dist/) and as this build does, draining
// --statement-n due timeouts --statement-k at a time on two connections (bench/lib/drain-loop.ts,
// as bench:statements), interleaved rounds on fresh databases of the same server: the backends'
// CPU seconds and the rate. And what the part tracing added to it costs inside PostgreSQL, which
// no rate on a shared box can show: EXPLAIN ANALYZE of this build's statement claiming
// --statement-k rows (rolled back, 7 times), the time of the trace_parents InitPlan (the distinct
// contexts, at most 32) against the statement's. And what a span costs the engine's process when
// tracing is off: withSpan (the engine's one entry) around an async call, against the bare call,
// 200,000 times, in this process (no SDK registered: the API's no-op span).
//
//   --n <count>        burst size (default 100,000)
//   --rounds <r>       interleaved rounds (default 3)
//   --refs <list>      which references: before,main (default both), or none
//   --lead-ms <ms>     how long before the due instant the loading starts, beyond the loading's own
//                      estimate (default 10,000: on a loaded box a shorter lead lets the loading run
//                      past the due instant, and that round's processes start with the burst overdue)
//   --wal-warmup-mb <mb>  WAL the bench PostgreSQL writes before the first round (default: lib/server.ts's)
//   --keep-refs        keep the reference worktrees (and reuse them next run: /tmp/tc-bench-ref-<commit>)
//   --statement-rounds <r>  rounds of the statement part (default 4)
//   --statement-n <n>  timeouts per statement round (default 200,000)
//   --statement-k <k>  rows per statement (default 5,000)
//   --skip-statement   no statement part
//   --skip-burst       the statement part only
//   --out <file>       also write the figures as JSON here
//   --help             this text
import { execFileSync } from 'node:child_process';
import { existsSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type pg from 'pg';
// dist/: npm run bench:tracing builds first (the statement part runs this build's composed claim).
import { statementValues } from '../dist/db/queries.js';
import { batchSqlHandler } from '../dist/worker/sql-handler.js';
import { withSpan } from '../dist/observability/tracing.js';
import { killAll } from '../test/helpers/processes.ts';
import { dueDatabase } from './lib/due-database.ts';
import { drainLoop, expectDrained } from './lib/drain-loop.ts';
import { CLOSE_MANY_SQL, KIND } from './lib/orders.ts';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { Status } from './lib/status.ts';
import { cpuSeconds, TC_DEFAULTS, type Variant } from './lib/systems.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';
import { burst, type BurstResult } from './lib/workloads.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    rounds: { type: 'string' },
    refs: { type: 'string' },
    'keep-refs': { type: 'boolean', default: false },
    'wal-warmup-mb': { type: 'string' },
    'lead-ms': { type: 'string' },
    'statement-rounds': { type: 'string' },
    'statement-n': { type: 'string' },
    'statement-k': { type: 'string' },
    'skip-statement': { type: 'boolean', default: false },
    'skip-burst': { type: 'boolean', default: false },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const opt = positiveCounts(
  'bench:tracing',
  {
    n: args.n,
    rounds: args.rounds,
    'lead-ms': args['lead-ms'],
    'statement-rounds': args['statement-rounds'],
    'statement-n': args['statement-n'],
    'statement-k': args['statement-k'],
  },
  { n: 100_000, rounds: 3, 'lead-ms': 10_000, 'statement-rounds': 4, 'statement-n': 200_000, 'statement-k': 5000 },
);
const refNames = (args.refs ?? 'before,main')
  .split(',')
  .map((s) => s.trim())
  .filter((s) => s && s !== 'none');
for (const r of refNames) if (r !== 'before' && r !== 'main') failUsage('bench:tracing', `--refs takes before, main or none, got ${r}`);

const root = fileURLToPath(new URL('..', import.meta.url));
const status = new Status();
const git = (...a: string[]) => execFileSync('git', ['-C', root, ...a], { encoding: 'utf8' }).trim();
const TRACING_PATHS = ['src/observability/tracing.ts', 'sql/0022_trace_context.sql'];

// Tracing off means no OTEL_* variable at all: none of the bench's own reaches a process.
for (const k of Object.keys(process.env)) if (k.startsWith('OTEL_')) delete process.env[k];

/** The reference commits, as described at the top. */
function referenceCommits(): { id: string; commit: string; what: string }[] {
  const out: { id: string; commit: string; what: string }[] = [];
  if (refNames.includes('before')) {
    const first = git('log', '--reverse', '--format=%H', '--', ...TRACING_PATHS).split('\n')[0];
    if (!first) throw new Error(`no commit touches ${TRACING_PATHS.join(' or ')}`);
    out.push({ id: 'ref-before', commit: git('rev-parse', `${first}^`), what: `the commit before tracing existed (parent of ${first.slice(0, 7)})` });
  }
  if (refNames.includes('main')) {
    const merged = git('log', '--first-parent', '--reverse', '--format=%H', '--', ...TRACING_PATHS).split('\n')[0];
    if (!merged) throw new Error('tracing is not on the first-parent history');
    out.push({ id: 'ref-main', commit: git('rev-parse', `${merged}^1`), what: `main before tracing was merged (first parent of ${merged.slice(0, 7)})` });
  }
  return out;
}

/** A built checkout of commit under /tmp (reused when already built). */
function buildReference(commit: string): string {
  const dir = `/tmp/tc-bench-ref-${commit.slice(0, 12)}`;
  const cli = join(dir, 'dist', 'cli', 'main.js');
  if (existsSync(cli)) return dir;
  status.log(`building ${commit.slice(0, 7)} in ${dir}`);
  if (!existsSync(dir)) git('worktree', 'add', '--detach', dir, commit);
  if (!existsSync(join(dir, 'node_modules'))) symlinkSync(realpathSync(join(root, 'node_modules')), join(dir, 'node_modules'));
  // Its own build script (compile the SQL, then tsc), with this checkout's installed packages.
  execFileSync('npm', ['run', 'build', '--silent'], { cwd: dir, stdio: 'inherit' });
  if (!existsSync(cli)) throw new Error(`the build of ${commit} left no ${cli}`);
  return dir;
}

function removeReference(dir: string): void {
  try {
    git('worktree', 'remove', '--force', dir);
  } catch (err) {
    status.log(`could not remove the worktree ${dir}: ${(err as Error).message}`);
  }
}

/** The OTLP/HTTP sink: answers each export 200 and keeps only counts. */
async function startSink(): Promise<{ server: Server; url: string; counts: { exports: number; spans: number; bytes: number } }> {
  const counts = { exports: 0, spans: 0, bytes: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      counts.exports += 1;
      counts.bytes += body.length;
      try {
        const doc = JSON.parse(body.toString('utf8')) as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
        for (const rs of doc.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) counts.spans += ss.spans?.length ?? 0;
      } catch {
        /* not JSON (protobuf): counted in bytes only */
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, counts };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const fmt = (x: number, digits = 0) => x.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits });

let server: BenchServer | undefined;
let sink: Awaited<ReturnType<typeof startSink>> | undefined;
const built: string[] = [];

async function main(): Promise<number> {
  const head = git('rev-parse', '--short', 'HEAD');
  const dirty = git('status', '--porcelain', '--untracked-files=no', '--', 'src', 'sql') !== '';
  if (!existsSync(join(root, 'dist', 'cli', 'main.js'))) throw new Error('no dist/: npm run build first (npm run bench:tracing does)');
  const refs = referenceCommits().map((r) => {
    const dir = buildReference(r.commit);
    built.push(dir);
    return { ...r, dir };
  });
  sink = await startSink();
  const variants: Variant[] = [
    ...refs.map((r) => ({
      id: r.id,
      system: 'timeout-center' as const,
      label: `${r.id} ${r.commit.slice(0, 7)}`,
      settings: { ...TC_DEFAULTS, cli: join(r.dir, 'dist', 'cli', 'main.js') },
    })),
    { id: 'off', system: 'timeout-center', label: `tracing off ${head}${dirty ? '+' : ''}`, settings: { ...TC_DEFAULTS } },
    {
      id: 'on',
      system: 'timeout-center',
      label: `tracing on ${head}${dirty ? '+' : ''}`,
      settings: { ...TC_DEFAULTS, env: { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_SERVICE_NAME: 'tc-bench' } },
    },
  ];
  status.set('starting the bench PostgreSQL and writing its WAL warm-up');
  const warmup = args['wal-warmup-mb'];
  server = await startBenchServer(warmup === undefined ? {} : { walWarmupBytes: Number(warmup) * 1024 * 1024 });
  const env = { status, server };
  const byVariant = new Map<string, (BurstResult & { load: [number, number]; spans?: number })[]>();
  for (let round = 0; round < (args['skip-burst'] ? 0 : opt.rounds); round += 1) {
    const order = variants.map((_, i) => variants[(i + round) % variants.length]!);
    for (const v of order) {
      status.step(`round ${round + 1}/${opt.rounds} · ${v.label}`);
      const loadBefore = loadavg()[0]!;
      const spansBefore = sink.counts.spans;
      const b = await burst(v, opt.n, 300, env, opt['lead-ms']);
      const load: [number, number] = [loadBefore, loadavg()[0]!];
      const spans = v.id === 'on' ? sink.counts.spans - spansBefore : undefined;
      byVariant.set(v.id, [...(byVariant.get(v.id) ?? []), { ...b, load, ...(spans === undefined ? {} : { spans }) }]);
      status.log(
        `round ${round + 1} ${v.label}: ${fmt(b.rate)} /s, ${b.seconds.toFixed(2)} s, engine CPU ${(b.consumerCpuSeconds ?? 0).toFixed(2)} s, ` +
          `PostgreSQL CPU ${(b.dbCpuSeconds ?? 0).toFixed(2)} s, lateness p50 ${b.lateness.p50.toFixed(2)} s p99 ${b.lateness.p99.toFixed(2)} s, ` +
          `load ${load[0].toFixed(1)}→${load[1].toFixed(1)}${b.overrunMs > 0 ? `, loading overran the due instant by ${b.overrunMs} ms` : ''}` +
          `${spans === undefined ? '' : `, ${spans} spans exported`}; correct: ${b.correctness.ok ? 'yes' : b.correctness.problems.join('; ')}`,
      );
      if (!b.correctness.ok) throw new Error(`${v.label}: the drain was not correct: ${b.correctness.problems.join('; ')}`);
    }
  }
  status.clear();
  const summary = variants
    .filter((v) => byVariant.has(v.id))
    .map((v) => {
      const runs = byVariant.get(v.id)!;
      return {
        id: v.id,
        label: v.label,
        rates: runs.map((r) => Math.round(r.rate)),
        rate: median(runs.map((r) => r.rate)),
        cpu: median(runs.map((r) => r.consumerCpuSeconds ?? 0)),
        cpus: runs.map((r) => +(r.consumerCpuSeconds ?? 0).toFixed(2)),
        dbCpu: median(runs.map((r) => r.dbCpuSeconds ?? 0)),
        overruns: runs.filter((r) => r.overrunMs > 0).length,
        p99: median(runs.map((r) => r.lateness.p99)),
        load: runs.map((r) => r.load.map((x) => +x.toFixed(1))),
        spans: runs.map((r) => r.spans).filter((x) => x !== undefined),
      };
    });
  const by = (id: string) => summary.find((s) => s.id === id);
  const lines = args['skip-burst']
    ? [`bench:tracing, the statement part only, ${cpus().length} CPUs, ${new Date().toISOString()}`]
    : [
        `bench:tracing, burst of ${fmt(opt.n)}, ${opt.rounds} interleaved rounds, ${cpus().length} CPUs, ${new Date().toISOString()}`,
        '',
        '| variant | rate per round (/s) | median rate | engine CPU s per round | median engine CPU s | median PostgreSQL CPU s | median lateness p99 | load (1 min) before→after each round |',
        '| --- | --- | --- | --- | --- | --- | --- | --- |',
        ...summary.map(
          (s) =>
            `| ${s.label} | ${s.rates.map((r) => fmt(r)).join(' · ')} | ${fmt(s.rate)} | ${s.cpus.join(' · ')} | ${s.cpu.toFixed(2)} | ${s.dbCpu.toFixed(2)} | ${s.p99.toFixed(2)} s${s.overruns ? ` (${s.overruns} overran)` : ''} | ${s.load.map((l) => l.join('→')).join(' · ')} |`,
        ),
        '',
      ];
  const ratios: Record<string, { rate: number; cpu: number; dbCpu: number }> = {};
  for (const num of ['off', 'on']) {
    for (const den of [...refs.map((r) => r.id), ...(num === 'on' ? ['off'] : [])]) {
      const a = by(num);
      const b = by(den);
      if (!a || !b) continue;
      ratios[`${num}/${den}`] = { rate: a.rate / b.rate, cpu: a.cpu / b.cpu, dbCpu: a.dbCpu / b.dbCpu };
      lines.push(
        `${num}/${den}: rate ${(a.rate / b.rate).toFixed(2)}x, engine CPU ${(a.cpu / b.cpu).toFixed(2)}x, PostgreSQL CPU ${(a.dbCpu / b.dbCpu).toFixed(2)}x`,
      );
    }
  }
  const statement = refs.length > 0 && !args['skip-statement'] ? await statementPart(server, refs[refs.length - 1]!, lines) : undefined;
  const noop = await noopSpanCost();
  lines.push(
    '',
    `a span with tracing off (withSpan around an async call, this process, no SDK): ${noop.map((r) => `${r.withSpanUs.toFixed(2)} µs`).join(' · ')} per call, ` +
      `the bare call ${noop.map((r) => `${r.bareUs.toFixed(2)} µs`).join(' · ')}`,
  );
  const on = by('on');
  if (on) lines.push(`spans exported per round (tracing on): ${on.spans.join(' · ')} (${fmt(sink.counts.bytes / 1024)} KiB of OTLP JSON in all)`);
  process.stdout.write(`${lines.join('\n')}\n`);
  if (args.out) {
    writeFileSync(
      args.out,
      JSON.stringify(
        {
          at: new Date().toISOString(),
          head,
          dirty,
          options: opt,
          references: refs.map(({ id, commit, what }) => ({ id, commit, what })),
          summary,
          ratios,
          statement,
          noopSpan: noop,
          runs: Object.fromEntries(byVariant),
        },
        null,
        2,
      ),
    );
  }
  return 0;
}

/** The statement part (see the top): the reference's batch claim against this build's. */
async function statementPart(srv: BenchServer, ref: { id: string; commit: string; dir: string }, lines: string[]) {
  const AS_TEXT = { getTypeParser: () => (value: string) => value };
  type Builder = (pool: pg.Pool, handlerSql: string, timeLimitMs: number) => Promise<{ sql: string } | undefined>;
  const refBuilder = ((await import(join(ref.dir, 'dist', 'worker', 'sql-handler.js'))) as { batchSqlHandler: Builder }).batchSqlHandler;
  const forms: { id: string; build: Builder }[] = [
    { id: ref.id, build: refBuilder },
    { id: 'this build', build: batchSqlHandler },
  ];
  const n = opt['statement-n'];
  const k = opt['statement-k'];
  const runs = new Map<string, { rate: number; cpu: number }[]>();
  for (let round = 0; round < opt['statement-rounds']; round += 1) {
    for (const form of round % 2 === 0 ? forms : [...forms].reverse()) {
      status.step(`statement round ${round + 1}/${opt['statement-rounds']} · ${form.id}`);
      status.set(`loading ${fmt(n)} due timeouts`);
      const { pool, drop } = await dueDatabase(srv, { label: 'bench_tracing_claim', n, schema: 'ours', shardSize: k, poolMax: 3 });
      try {
        const batch = await form.build(pool, CLOSE_MANY_SQL, 60_000);
        if (!batch) throw new Error(`${form.id}: the close statement has no batch form`);
        const pids = new Map<pg.PoolClient, number>();
        status.set('draining');
        const { total, seconds } = await drainLoop(pool, 2, async (c, shard) => {
          if (!pids.has(c)) pids.set(c, (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
          await c.query('BEGIN');
          const { rows } = await c.query<{ n: string }>({
            text: batch.sql,
            values: statementValues('worker/claim', { shardId: shard, kind: KIND, claimLimit: k, batch: true }),
            types: AS_TEXT,
          });
          await c.query('COMMIT');
          return Number(rows[0]!.n);
        });
        // Read before the pool ends: the backends' CPU time dies with them.
        const cpu = [...pids.values()].reduce((sum, pid) => sum + cpuSeconds(pid), 0);
        await expectDrained(pool, form.id, n, total);
        runs.set(form.id, [...(runs.get(form.id) ?? []), { rate: total / seconds, cpu }]);
        status.log(`statement round ${round + 1} ${form.id}: ${fmt(total / seconds)} /s, backends' CPU ${cpu.toFixed(2)} s`);
      } finally {
        await drop();
      }
    }
  }
  status.clear();
  const med = (id: string) => ({ rate: median(runs.get(id)!.map((r) => r.rate)), cpu: median(runs.get(id)!.map((r) => r.cpu)) });
  const a = med(ref.id);
  const b = med('this build');
  lines.push(
    '',
    `claim.sql batch form alone (${fmt(n)} timeouts, ${fmt(k)} per statement, 2 connections, ${opt['statement-rounds']} interleaved rounds):`,
    ...forms.map(
      (f) =>
        `  ${f.id}: ${runs
          .get(f.id)!
          .map((r) => `${fmt(r.rate)} /s ${r.cpu.toFixed(2)} s`)
          .join(' · ')}; median ${fmt(med(f.id).rate)} /s, CPU ${med(f.id).cpu.toFixed(2)} s`,
    ),
    `  this build / ${ref.id}: rate ${(b.rate / a.rate).toFixed(2)}x, backends' CPU ${(b.cpu / a.cpu).toFixed(2)}x`,
  );
  const explained = await explainClaim(srv, k);
  lines.push(
    `  EXPLAIN ANALYZE of this build's statement claiming ${fmt(k)} rows (7 runs, rolled back): the trace_parents InitPlan ` +
      `${explained.initPlanMs.map((x) => x.toFixed(2)).join(' · ')} ms (median ${median(explained.initPlanMs).toFixed(2)}), ` +
      `the whole statement median ${median(explained.totalMs).toFixed(1)} ms: ${((100 * median(explained.initPlanMs)) / median(explained.totalMs)).toFixed(2)} %`,
  );
  return { reference: ref.id, n, k, runs: Object.fromEntries(runs), ratio: { rate: b.rate / a.rate, cpu: b.cpu / a.cpu }, explain: explained };
}

/** withSpan with no SDK registered (what the engine calls ~6 times per shard and 5 times per
 *  coordinator tick), against the same async call bare; three rounds of 200,000. */
async function noopSpanCost(): Promise<{ withSpanUs: number; bareUs: number }[]> {
  const calls = 200_000;
  const bare = async (i: number) => i + 1;
  const out: { withSpanUs: number; bareUs: number }[] = [];
  for (let round = 0; round < 3; round += 1) {
    let t = performance.now();
    for (let i = 0; i < calls; i += 1) await bare(i);
    const bareUs = ((performance.now() - t) * 1000) / calls;
    t = performance.now();
    for (let i = 0; i < calls; i += 1) await withSpan('tc.bench', { 'tc.i': i }, () => bare(i));
    out.push({ withSpanUs: ((performance.now() - t) * 1000) / calls, bareUs });
  }
  return out;
}

interface PlanNode {
  'Node Type': string;
  'Subplan Name'?: string;
  'Actual Total Time': number;
  'Actual Loops': number;
  Filter?: string;
  Plans?: PlanNode[];
}

/** The trace_parents InitPlan's time (the aggregate over the distinct contexts, as EXPLAIN
 *  ANALYZE reports it) and the statement's execution time, claiming k due rows. */
async function explainClaim(srv: BenchServer, k: number): Promise<{ initPlanMs: number[]; totalMs: number[] }> {
  status.step('EXPLAIN ANALYZE of the claim');
  const { pool, drop } = await dueDatabase(srv, { label: 'bench_tracing_explain', n: k, schema: 'ours', shardSize: k, poolMax: 2 });
  const out = { initPlanMs: [] as number[], totalMs: [] as number[] };
  try {
    const batch = await batchSqlHandler(pool, CLOSE_MANY_SQL, 60_000);
    if (!batch) throw new Error('the close statement has no batch form');
    const client = await pool.connect();
    try {
      for (let i = 0; i < 7; i += 1) {
        await client.query('BEGIN');
        const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number }] }>({
          text: `EXPLAIN (ANALYZE, FORMAT JSON) ${batch.sql}`,
          values: statementValues('worker/claim', { shardId: 1, kind: KIND, claimLimit: k, batch: true }),
        });
        await client.query('ROLLBACK');
        const plan = rows[0]!['QUERY PLAN'][0];
        // The InitPlan whose subtree filters on trace_parent, in the branch that ran (loops > 0).
        let initPlan = 0;
        const walk = (node: PlanNode, inside: boolean): boolean => {
          const mine = (node['Subplan Name'] ?? '').startsWith('InitPlan');
          const found = (node.Filter ?? '').includes('trace_parent') || (node.Plans ?? []).some((p) => walk(p, inside || mine));
          if (mine && found && node['Actual Loops'] > 0) initPlan = Math.max(initPlan, node['Actual Total Time']);
          return found;
        };
        walk(plan.Plan, false);
        out.initPlanMs.push(initPlan);
        out.totalMs.push(plan['Execution Time']);
      }
    } finally {
      client.release();
    }
  } finally {
    await drop();
  }
  status.clear();
  return out;
}

async function cleanUp(): Promise<void> {
  await killAll().catch(() => {});
  await server?.stop().catch(() => {});
  await new Promise((r) => (sink ? sink.server.close(r) : r(undefined)));
  if (!args['keep-refs']) for (const dir of built) removeReference(dir);
}

main().then(
  async (code) => {
    await cleanUp();
    process.exit(code);
  },
  async (err: unknown) => {
    status.clear();
    process.stderr.write(`bench:tracing failed: ${(err as Error).stack ?? String(err)}\n`);
    await cleanUp();
    process.exit(1);
  },
);
