// npm run bench [-- options]: drain throughput and lateness of timeout-center against the pure-SQL
// limit (on the minimal schema and on ours), pg-boss, graphile-worker and BullMQ. The bench starts
// and owns its PostgreSQL (bench/lib/server.ts: settings in the report, track_commit_timestamp on);
// every system's end time and lateness are read at commit. Redis: the local one (BENCH_REDIS_URL).
//
//   --smoke              a few thousand timeouts, every system, a few seconds each (CI)
//   --million            burst of 1,000,000 (default 200,000)
//   --n <count>          burst size
//   --rate <per s>       steady arrival rate (default 5000); a list (5000,20000) runs each rate, the
//                        second and later ones for timeout-center and the minimal limit only
//                        --duration <s> (60)   --delay <s> (3)
//   --pending <count>    pending-scale workload size (default 10,000,000)
//   --workloads 1,2,3,4  which workloads (default all)
//   --only <ids>         variant ids or system names (see bench/lib/variants.ts)
//   --tune               burst only, over timeout-center's candidate settings
//   --out <dir>          where benchmarks.md and bench/*.svg go (default docs/; smoke: a temp dir)
//   --report-only        rewrite the document from <out>/bench/results.json
//   --rounds <n>         burst n times for timeout-center, the limit and pg-boss batch, interleaved;
//                        report the median (default 1)
//   --keep               keep the databases
//   --ref <checkout>     also run another checkout's build (its dist/, e.g. a git worktree of the
//                        code before a change) with the defaults, as variant tc-ref, interleaved
//                        with the rest: an A/B of two versions in one run
//   --help               this text
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { killAll } from '../test/helpers/processes.ts';
import { bestBySystem, table, targets, writeReport, type Results } from './lib/report.ts';
import { Status } from './lib/status.ts';
import { printUsage } from './lib/usage.ts';
import { SMOKE_IDS, TC_TUNE, VARIANTS } from './lib/variants.ts';
import { burst, pendingScale, REDIS_URL, steady, type BurstResult } from './lib/workloads.ts';
import { TC_DEFAULTS, type Variant } from './lib/systems.ts';

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    million: { type: 'boolean', default: false },
    n: { type: 'string' },
    rate: { type: 'string' },
    duration: { type: 'string' },
    delay: { type: 'string' },
    pending: { type: 'string' },
    ticks: { type: 'string' },
    workloads: { type: 'string' },
    only: { type: 'string' },
    tune: { type: 'boolean', default: false },
    out: { type: 'string' },
    'report-only': { type: 'boolean', default: false },
    'max-seconds': { type: 'string' },
    rounds: { type: 'string' },
    keep: { type: 'boolean', default: false },
    ref: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});

if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}

const root = fileURLToPath(new URL('..', import.meta.url));
const smoke = args.smoke;
const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v.replace(/_/g, '')));
const burstN = num(args.n, smoke ? 3000 : args.million ? 1_000_000 : 200_000);
const rates = (args.rate ?? (smoke ? '400' : '5000')).split(',').map((x) => num(x.trim(), 5000));
const rate = rates[0]!;
const durationS = num(args.duration, smoke ? 2 : 60);
const delayS = num(args.delay, smoke ? 1 : 3);
const pending = num(args.pending, smoke ? 20_000 : 10_000_000);
const ticks = num(args.ticks, smoke ? 3 : 10);
const maxSeconds = num(args['max-seconds'], smoke ? 60 : 180);
const rounds = num(args.rounds, 1);
const REPEATED = new Set(['timeout-center', 'pure-sql', 'minimal-sql', 'pg-boss-batch']);
const memoryN = smoke ? burstN : 1_000_000;
const leadMs = smoke ? 1500 : 2500;
const tickSpacingMs = smoke ? 200 : 1000;
const workloads = new Set((args.workloads ?? (args.tune ? '1' : '1,2,3,4')).split(',').map((s) => Number(s.trim())));
const outDir = args.out ?? (smoke ? mkdtempSync(join(tmpdir(), 'tc-bench-smoke-')) : join(root, 'docs'));
const status = new Status();
let server: BenchServer | undefined;

function pick(): Variant[] {
  if (args.tune && !args.only) return TC_TUNE;
  let list = smoke ? VARIANTS.filter((v) => SMOKE_IDS.includes(v.id)) : VARIANTS;
  if (args.only) {
    const want = args.only.split(',').map((s) => s.trim());
    list = VARIANTS.concat(TC_TUNE).filter((v) => want.includes(v.id) || want.includes(v.system));
  }
  if (args.ref) list = [...list, refVariant(args.ref)];
  return list;
}

/** The defaults run by another checkout's build (--ref). */
function refVariant(checkout: string): Variant {
  const cli = join(checkout, 'dist', 'cli', 'main.js');
  if (!existsSync(cli)) throw new Error(`--ref ${checkout}: no ${cli}; run npm ci && npm run build there first`);
  const commit = execFileSync('git', ['-C', checkout, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  return { id: 'tc-ref', system: 'timeout-center', label: `timeout-center (default) at ${commit}`, settings: { ...TC_DEFAULTS, cli } };
}

async function versions(adminUrl: string): Promise<{ postgres: string; redis: string }> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  const { rows } = await c.query<{ v: string }>("SELECT current_setting('server_version') AS v");
  await c.end();
  let redis = '?';
  try {
    redis = /redis_version:(\S+)/.exec(execFileSync('redis-cli', ['-u', REDIS_URL, 'info', 'server'], { encoding: 'utf8' }))?.[1] ?? '?';
  } catch {
    /* redis-cli not installed */
  }
  return { postgres: `PostgreSQL ${rows[0]!.v.split(' ')[0]}`, redis };
}

function ms(q: { p50: number; p99: number }): string {
  return `${(q.p50 * 1000).toFixed(0)}/${(q.p99 * 1000).toFixed(0)} ms`;
}

async function main(): Promise<number> {
  if (args['report-only']) {
    const r = JSON.parse(readFileSync(join(outDir, 'bench', 'results.json'), 'utf8')) as Results;
    const path = writeReport(r, outDir, 'benchmarks.md', analysis(), otherBenches());
    process.stdout.write(`${table(r)}\n\nwrote ${path}\n`);
    return 0;
  }
  const variants = pick();
  status.set(smoke ? 'starting the bench PostgreSQL' : 'starting the bench PostgreSQL and writing its WAL warm-up');
  // A smoke run writes little WAL: no warm-up (see warmWal in lib/server.ts).
  const srv = await startBenchServer({ walWarmupBytes: smoke ? 0 : undefined });
  server = srv;
  const v = await versions(srv.adminUrl);
  const results: Results = {
    meta: {
      date: new Date().toISOString(),
      mode: smoke ? 'smoke' : args.tune ? 'tune' : 'full',
      node: process.version,
      ...v,
      cpus: cpus().length,
      args: process.argv.slice(2),
      burstN,
      rate,
      durationS,
      delayS,
      notes: [],
      postgresSettings: { ...srv.settings, owned: srv.owned ? 'started by the bench (initdb, temp dir)' : 'BENCH_DATABASE_URL' },
    },
    variants: args.tune ? [] : variants,
    burst: [],
    steady: [],
    memory: [],
    tune: [],
  };
  const steps: { name: string; run: () => Promise<void> }[] = [];
  const env = { status, server: srv, keep: args.keep };

  if (workloads.has(1)) {
    // Rounds are interleaved (every system once, then again) so that a slow spell of the box does
    // not land on one system only; each system is reported by its median round.
    const byVariant = new Map<string, BurstResult[]>();
    for (let round = 1; round <= rounds; round++) {
      // Repeated: the systems the targets compare (timeout-center, the limit, pg-boss's batch
      // mode). The per-job peers are an order of magnitude slower: one round tells. Even rounds
      // run the systems in reverse order, so that no system always runs right after the same one
      // (or first, on a server that has just started).
      const repeated = round === 1 ? variants : variants.filter((x) => REPEATED.has(x.system));
      for (const variant of round % 2 === 0 ? [...repeated].reverse() : repeated) {
        steps.push({
          name: `burst ${burstN.toLocaleString('en')} · ${variant.label}${rounds > 1 && REPEATED.has(variant.system) ? ` · round ${round}/${rounds}` : ''}`,
          run: async () => {
            const b = await burst(variant, burstN, maxSeconds, env, leadMs);
            byVariant.set(variant.id, [...(byVariant.get(variant.id) ?? []), b]);
            if (b.overrunMs > 0)
              results.meta.notes.push(`${variant.label}: loading ran ${b.overrunMs} ms past the due time (burst timing starts at the due time)`);
            status.log(
              `burst ${variant.label}: ${Math.round(b.rate).toLocaleString('en')} timeouts/s, ${b.seconds.toFixed(2)} s, lateness p50 ${b.lateness.p50.toFixed(2)} s p99 ${b.lateness.p99.toFixed(2)} s` +
                `${b.timedOut ? ' (TIMED OUT)' : ''}; correct: ${b.correctness.ok ? 'yes' : b.correctness.problems.join('; ')}`,
            );
          },
        });
      }
    }
    steps.push({
      name: 'burst medians',
      run: async () => {
        for (const variant of variants) {
          const runs = byVariant.get(variant.id);
          if (!runs?.length) continue;
          const sorted = [...runs].sort((a, b) => a.rate - b.rate);
          const median: BurstResult = { ...sorted[Math.floor((sorted.length - 1) / 2)]!, ...(runs.length > 1 ? { roundRates: runs.map((r) => r.rate) } : {}) };
          // A round that was wrong makes the system's result wrong, whichever round is reported.
          const wrong = runs.find((r) => !r.correctness.ok);
          if (wrong) median.correctness = wrong.correctness;
          if (args.tune) results.tune.push({ ...median, settings: variant.settings });
          else results.burst.push(median);
        }
      },
    });
  }
  if (workloads.has(2) && !args.tune) {
    steps.push({
      name: 'steady',
      run: async () => {
        // timeout-center in both settings, and each other system in its best burst settings.
        const best = bestBySystem(results);
        // The smoke run keeps to timeout-center and the minimal limit (the peers ran in its burst).
        const all = variants.filter(
          (x) =>
            x.system === 'timeout-center' ||
            !best.size ||
            best.get(x.system)?.variant === x.id ||
            (!best.has(x.system) && variants.find((y) => y.system === x.system) === x),
        );
        const first = smoke ? all.filter((x) => x.system === 'timeout-center' || x.system === 'minimal-sql') : all;
        const runs = rates.flatMap((rt, i) =>
          (i === 0 ? first : first.filter((x) => x.system === 'timeout-center' || x.system === 'minimal-sql')).map((v) => ({ v, rt })),
        );
        let i = 0;
        for (const { v: variant, rt } of runs) {
          i += 1;
          status.step(`steady ${rt}/s ${i}/${runs.length} · ${variant.label}`);
          const s = await steady(variant, rt, durationS, delayS, env);
          results.steady.push(s);
          status.log(
            `steady ${variant.label}: ${Math.round(s.achievedRate)}/s arrived, lateness p50 ${(s.lateness.p50 * 1000).toFixed(0)} ms p99 ${(s.lateness.p99 * 1000).toFixed(0)} ms max ${(s.lateness.max * 1000).toFixed(0)} ms, max backlog ${s.maxBacklog}; correct: ${s.correctness.ok ? 'yes' : s.correctness.problems.join('; ')}` +
              (s.stages
                ? `; ${s.stages.shards} shards of ${Math.round(s.stages.rowsPerShard)} rows; due->planned p50/p99 ${ms(s.stages.planned)}, planned->leased ${ms(s.stages.leased)}, leased->commit ${ms(s.stages.committed)}`
                : ''),
          );
        }
      },
    });
  }
  if (workloads.has(3) && !args.tune) {
    steps.push({
      name: `pending scale ${pending.toLocaleString('en')}`,
      run: async () => {
        const p = await pendingScale(pending, ticks, tickSpacingMs, env);
        results.pending = p;
        status.log(
          `pending scale: tick ${p.empty.msMedian.toFixed(2)} ms empty, ${p.loaded.msMedian.toFixed(2)} ms with ${pending.toLocaleString('en')} pending (${p.ratio.toFixed(2)}×); ${p.bytesPerTimeout.toFixed(0)} bytes per pending timeout`,
        );
      },
    });
  }
  if (workloads.has(4) && !args.tune) {
    for (const variant of variants.filter((x) => x.system === 'timeout-center')) {
      steps.push({
        name: `flood memory ${memoryN.toLocaleString('en')} · ${variant.label}`,
        run: async () => {
          const reuse = burstN >= memoryN ? results.burst.find((b) => b.variant === variant.id) : undefined;
          const b = reuse ?? (await burst(variant, memoryN, Math.max(maxSeconds, 300), env, leadMs));
          results.memory.push(b);
          status.log(
            `flood memory ${variant.label}: ${b.rss.map((p) => `${p.name} ${p.peakRssMb} MB`).join(', ')}; ${Math.round(b.rate).toLocaleString('en')} timeouts/s; correct: ${b.correctness.ok ? 'yes' : b.correctness.problems.join('; ')}`,
          );
        },
      });
    }
  }

  let failed = 0;
  for (const [i, step] of steps.entries()) {
    status.step(`[${i + 1}/${steps.length}] ${step.name}`);
    const began = Date.now();
    try {
      await step.run();
      if (smoke) status.log(`  (${step.name}: ${((Date.now() - began) / 1000).toFixed(1)} s)`);
    } catch (err) {
      failed += 1;
      results.meta.notes.push(`${step.name} failed: ${(err as Error).message}`);
      status.log(`FAILED ${step.name}: ${(err as Error).stack ?? String(err)}`);
    }
  }
  status.clear();
  const leaked = await killAll();
  await srv.stop();
  if (leaked.length > 0) results.meta.notes.push(`processes still running at the end (killed): ${leaked.join(', ')}`);

  const path = writeReport(results, outDir, 'benchmarks.md', smoke || args.tune ? '' : analysis(), smoke || args.tune ? '' : otherBenches());
  process.stdout.write(`\n${table(results)}\n\n`);
  for (const t of targets(results))
    process.stdout.write(`${t.met === null ? 'info  ' : t.met ? 'met   ' : 'MISSED'} ${t.name}: ${t.actual} (target ${t.target})\n`);
  if (results.tune.length > 0) {
    for (const t of results.tune)
      process.stdout.write(`tune ${t.variant}: ${Math.round(t.rate)} /s, p99 ${t.lateness.p99.toFixed(2)} s, correct ${t.correctness.ok}\n`);
  }
  process.stdout.write(`\nwrote ${path}\n`);
  const incorrect = [...results.burst, ...results.steady, ...results.memory, ...results.tune].filter((x) => !x.correctness.ok);
  if (incorrect.length > 0)
    process.stdout.write(`correctness checks FAILED: ${incorrect.map((x) => `${x.variant}: ${x.correctness.problems.join('; ')}`).join(' | ')}\n`);
  return failed > 0 || incorrect.length > 0 ? 1 : 0;
}

/** Hand-written text of docs/benchmarks.md: the method, the figures and what bounds them (bench/analysis.md,
 *  after the targets) and the other benches' figures (bench/other-benches.md, at the end). */
function handWritten(name: string): string {
  const p = join(root, 'bench', name);
  return existsSync(p) ? readFileSync(p, 'utf8') : '';
}
const analysis = () => handWritten('analysis.md');
const otherBenches = () => handWritten('other-benches.md');

main().then(
  (code) => process.exit(code),
  async (err: unknown) => {
    status.clear();
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
    await killAll().catch(() => {});
    await server?.stop().catch(() => {});
    process.exit(1);
  },
);
