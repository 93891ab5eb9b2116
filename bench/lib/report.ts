// The results: one table on stdout, and docs/benchmarks.md with the table, the charts (SVG) and
// the settings tried. Everything here is computed from results.json, so `--report-only`
// rewrites the document without rerunning.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { barChart, lineChart } from './svg.ts';
import type { Variant } from './systems.ts';
import type { BurstResult, PendingResult, SteadyResult } from './workloads.ts';

export interface Results {
  meta: {
    date: string;
    mode: string;
    node: string;
    postgres: string;
    redis: string;
    cpus: number;
    args: string[];
    burstN: number;
    rate: number;
    durationS: number;
    delayS: number;
    notes: string[];
    /** the bench's PostgreSQL settings, read back from the server */
    postgresSettings?: Record<string, string>;
  };
  variants: Variant[];
  burst: BurstResult[];
  steady: SteadyResult[];
  memory: BurstResult[];
  pending?: PendingResult;
  tune: (BurstResult & { settings: Record<string, unknown> })[];
}

const n0 = (v: number) => Math.round(v).toLocaleString('en');
const s2 = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const ms = (s: number) => (s * 1000 >= 10_000 ? `${s.toFixed(1)} s` : `${Math.round(s * 1000)} ms`);

function label(r: Results, id: string): string {
  return r.variants.find((v) => v.id === id)?.label ?? id;
}

function system(r: Results, id: string): string {
  return r.variants.find((v) => v.id === id)?.system ?? 'timeout-center';
}

/** Best burst result per system. */
export function bestBySystem(r: Results): Map<string, BurstResult> {
  const best = new Map<string, BurstResult>();
  for (const b of r.burst) {
    const sys = system(r, b.variant);
    const cur = best.get(sys);
    if (!b.timedOut && b.correctness.ok && (!cur || b.rate > cur.rate)) best.set(sys, b);
    else if (!cur && !best.has(sys)) best.set(sys, b);
  }
  return best;
}

export interface Target {
  name: string;
  target: string;
  actual: string;
  met: boolean | null;
}

export function targets(r: Results): Target[] {
  const out: Target[] = [];
  const best = bestBySystem(r);
  // The faster of timeout-center's two settings in this run (on a shared box either may win).
  const tc = best.get('timeout-center');
  const sql = reference(r);
  const ours = best.get('pure-sql');
  const boss = [best.get('pg-boss-batch'), best.get('pg-boss-job')].filter((b): b is BurstResult => !!b).sort((a, b) => b.rate - a.rate)[0];
  if (tc && sql) {
    const x = tc.rate / sql.rate;
    out.push({
      name: `burst ${n0(r.meta.burstN)}: timeout-center's best vs the minimal limit (${label(r, sql.variant)})`,
      target: '≥ 0.9×',
      actual: `${x.toFixed(2)}× (${n0(tc.rate)} vs ${n0(sql.rate)} /s)`,
      met: x >= 0.9,
    });
  }
  if (ours && sql && ours !== sql) {
    const x = ours.rate / sql.rate;
    out.push({
      name: 'the limit on our schema vs on the minimal one (what the schema costs)',
      target: '(information)',
      actual: `${x.toFixed(2)}× (${n0(ours.rate)} vs ${n0(sql.rate)} /s)`,
      met: null,
    });
  }
  const dflt = r.burst.find((b) => b.variant === 'tc-default');
  const tuned = r.burst
    .filter((b) => b.variant !== 'tc-default' && system(r, b.variant) === 'timeout-center' && b.correctness.ok)
    .sort((a, b) => b.rate - a.rate)[0];
  if (dflt && tuned) {
    const x = dflt.rate / Math.max(tuned.rate, dflt.rate);
    out.push({
      name: `burst: defaults vs the best tuned settings (${label(r, tuned.variant)})`,
      target: '≥ 0.85×',
      actual: `${x.toFixed(2)}× (${n0(dflt.rate)} vs ${n0(tuned.rate)} /s)`,
      met: x >= 0.85,
    });
  }
  if (tc && boss) {
    const x = tc.rate / boss.rate;
    out.push({
      name: "burst drain vs pg-boss's best",
      target: '≥ 4×',
      actual: `${x.toFixed(2)}× (${n0(tc.rate)} vs ${n0(boss.rate)} /s, ${label(r, boss.variant)})`,
      met: x >= 4,
    });
  }
  for (const st of r.steady.filter((s) => system(r, s.variant) === 'timeout-center')) {
    const id = st.variant;
    // The issue's targets, at commit: p99 ≤ 100 ms at 5,000/s and ≤ 250 ms at 20,000/s; p50 ≤ 50 ms at 5,000/s.
    const p99Max = st.rate >= 20_000 ? 0.25 : 0.1;
    out.push({
      name: `steady p99 lateness at ${n0(st.rate)}/s (${label(r, id)})`,
      target: `≤ ${p99Max * 1000} ms`,
      actual: ms(st.lateness.p99),
      met: st.lateness.p99 <= p99Max && st.correctness.ok,
    });
    if (st.rate <= 5000)
      out.push({
        name: `steady p50 lateness at ${n0(st.rate)}/s (${label(r, id)})`,
        target: '≤ 50 ms',
        actual: ms(st.lateness.p50),
        met: st.lateness.p50 <= 0.05 && st.correctness.ok,
      });
  }
  if (r.pending) {
    const p = r.pending;
    out.push({
      name: `coordinator tick with ${n0(p.pending)} pending vs empty`,
      target: '≤ 1.5×',
      actual: `${p.ratio.toFixed(2)}× (${p.loaded.msMedian.toFixed(1)} vs ${p.empty.msMedian.toFixed(1)} ms median)`,
      met: p.ratio <= 1.5,
    });
  }
  return out;
}

/** The physical reference: the best limit on the minimal schema (the limit on ours without it). */
export function reference(r: Results): BurstResult | undefined {
  const best = bestBySystem(r);
  return best.get('minimal-sql') ?? best.get('pure-sql');
}

export function table(r: Results): string {
  const sql = reference(r);
  const lines: string[] = [];
  lines.push(
    `| system | burst ${n0(r.meta.burstN)}: timeouts/s | × minimal limit | burst lateness p50 / p99 / max | steady ${n0(r.meta.rate)}/s: lateness p50 / p99 / max | steady max backlog | peak RSS (MB) | correct |`,
  );
  lines.push('|---|---:|---:|---|---|---:|---|---|');
  const ids = r.variants.map((v) => v.id).filter((id) => r.burst.some((b) => b.variant === id) || r.steady.some((s) => s.variant === id));
  for (const id of ids) {
    const b = r.burst.find((x) => x.variant === id);
    const st = r.steady.find((x) => x.variant === id && x.rate === r.meta.rate);
    const rss = [...(b?.rss ?? [])].map((p) => `${p.name.replace(/^tc /, '')} ${p.peakRssMb}`).join(', ');
    const ok = [b, st]
      .filter((x) => x)
      .map((x) =>
        x!.timedOut ? `${x === b ? 'burst' : 'steady'} not drained in time` : x!.correctness.ok ? 'yes' : `NO: ${x!.correctness.problems.join('; ')}`,
      );
    const slow = st && st.achievedRate < st.rate * 0.95 ? ` (arrivals reached only ${n0(st.achievedRate)}/s)` : '';
    lines.push(
      `| ${label(r, id)} | ${b ? `${n0(b.rate)}${b.roundRates ? ` (${n0(Math.min(...b.roundRates))}–${n0(Math.max(...b.roundRates))})` : ''}${b.timedOut ? ' (timed out)' : ''}` : '–'} | ${b && sql ? (b.rate / sql.rate).toFixed(2) : '–'} | ${
        b ? `${s2(b.lateness.p50)} / ${s2(b.lateness.p99)} / ${s2(b.lateness.max)} s` : '–'
      } | ${st ? `${ms(st.lateness.p50)} / ${ms(st.lateness.p99)} / ${ms(st.lateness.max)}${slow}` : '–'} | ${st ? n0(st.maxBacklog) : '–'} | ${rss || '–'} | ${[...new Set(ok)].join(', ')} |`,
    );
  }
  return lines.join('\n');
}

function costTable(r: Results): string {
  const lines = [
    '| system | WAL bytes / timeout | WAL records / timeout | full-page images / 1000 | non-HOT row versions / timeout | index entries / timeout (≤) | statements / 1000 timeouts | statement time µs / timeout | buffers touched / timeout | rows written / timeout | transactions / timeout | CPU ms per 1000 timeouts: PostgreSQL / consumers (during the drain) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const b of r.burst) {
    if (!b.cost) continue;
    const done = b.n * (b.timedOut ? b.lateness.count / (b.n - Math.floor(b.n / 10)) : 1);
    // The consumers' CPU from the due instant on (older results: over their whole life).
    const app = b.consumerCpuSeconds ?? b.rss.reduce((s, p) => s + (p.cpuSeconds ?? 0), 0);
    const cpu = b.dbCpuSeconds !== undefined ? `${((b.dbCpuSeconds / done) * 1e6).toFixed(0)} / ${((app / done) * 1e6).toFixed(0)}` : '–';
    // (rows read is left out: the bench's own progress query reads the whole orders table once a second)
    const c = b.cost;
    const wal =
      c.walBytes !== undefined
        ? `${c.walBytes.toFixed(0)} | ${c.walRecords.toFixed(2)} | ${(c.walFpi * 1000).toFixed(1)} | ${c.nonHotRows.toFixed(2)} | ${c.indexEntriesMax.toFixed(2)} | ${(c.statements * 1000).toFixed(2)} | ${(c.statementMs * 1000).toFixed(1)}`
        : '– | – | – | – | – | – | –';
    lines.push(
      `| ${label(r, b.variant)} | ${wal} | ${b.cost.buffers.toFixed(1)} | ${b.cost.rowsWritten.toFixed(2)} | ${b.cost.transactions.toFixed(3)} | ${cpu} |`,
    );
  }
  return lines.length > 2 ? lines.join('\n') : '';
}

function steadyTable(r: Results): string {
  if (new Set(r.steady.map((s) => s.rate)).size < 2) return '';
  const lines = ['| system | rate | arrivals reached | lateness p50 / p99 / max | max backlog | correct |', '|---|---:|---:|---|---:|---|'];
  for (const st of [...r.steady].sort((a, b) => a.rate - b.rate)) {
    lines.push(
      `| ${label(r, st.variant)} | ${n0(st.rate)}/s | ${n0(st.achievedRate)}/s | ${ms(st.lateness.p50)} / ${ms(st.lateness.p99)} / ${ms(st.lateness.max)} | ${n0(st.maxBacklog)} | ${st.timedOut ? 'not drained in time' : st.correctness.ok ? 'yes' : 'NO'} |`,
    );
  }
  return lines.join('\n');
}

function shardTable(r: Results): string {
  const lines = [
    '| settings | shards | rows / shard | due → first shard written | due → first shard leased | due → first close committed | shard queued (p50) | shard lease → commit (p50) | statements / shard |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const b of r.burst) {
    const s = b.shards;
    if (!s) continue;
    lines.push(
      `| ${label(r, b.variant)} | ${n0(s.count)} | ${n0(s.meanRows)} | ${ms(s.firstCreatedAfterDue)} | ${ms(s.firstStartedAfterDue)} | ${ms(b.lateness.min)} | ${ms(s.queuedP50)} | ${ms(s.runP50)} | ${s.statementsPerShard.toFixed(1)} |`,
    );
  }
  return lines.length > 2 ? lines.join('\n') : '';
}

/** The top statements of timeout-center's fastest setting and of the reference, side by side. */
function statementTable(r: Results): string {
  const out: string[] = [];
  const shown = new Set([bestBySystem(r).get('timeout-center')?.variant, reference(r)?.variant]);
  for (const b of r.burst) {
    if (!b.statements?.length || !shown.has(b.variant)) continue;
    const total = b.statements.reduce((t, x) => t + x.totalMs, 0) || 1;
    out.push(`**${label(r, b.variant)}** (top statements by execution time; pg_stat_statements, every process of the system)`, '');
    out.push('| statement | calls | rows | total ms | share | mean ms |', '|---|---:|---:|---:|---:|---:|');
    for (const x of b.statements.slice(0, 6)) {
      out.push(
        `| \`${x.query.slice(0, 110).replace(/\|/g, '\\|')}${x.query.length > 110 ? '…' : ''}\` | ${n0(x.calls)} | ${n0(x.rows)} | ${n0(x.totalMs)} | ${((x.totalMs / total) * 100).toFixed(0)} % | ${x.meanMs.toFixed(2)} |`,
      );
    }
    out.push('');
  }
  return out.join('\n');
}

function pendingTable(p: PendingResult): string {
  const row = (name: string, t: PendingResult['empty']) =>
    `| ${name} | ${t.msMedian.toFixed(2)} | ${t.msMean.toFixed(2)} | ${t.statementsPerTick.toFixed(1)} | ${t.rowsPerTick.toFixed(1)} | ${t.buffersPerTick.toFixed(1)} |`;
  return [
    '| pending timeouts | tick ms (median) | tick ms (mean) | statements / tick | rows read / tick | buffers / tick |',
    '|---|---:|---:|---:|---:|---:|',
    row('0', p.empty),
    row(n0(p.pending), p.loaded),
  ].join('\n');
}

function memoryTable(r: Results): string {
  const lines = ['| settings | timeouts | drain timeouts/s | process | peak RSS (MB) |', '|---|---:|---:|---|---:|'];
  for (const m of r.memory) for (const p of m.rss) lines.push(`| ${label(r, m.variant)} | ${n0(m.n)} | ${n0(m.rate)} | ${p.name} | ${p.peakRssMb} |`);
  return lines.join('\n');
}

function settingsTable(r: Results): string {
  const lines = ['| system | variant | settings | burst timeouts/s | steady p99 |', '|---|---|---|---:|---:|'];
  for (const v of r.variants) {
    const b = r.burst.find((x) => x.variant === v.id);
    const st = r.steady.find((x) => x.variant === v.id && x.rate === r.meta.rate);
    const settings = Object.entries(v.settings)
      .map(([k, val]) => `${k}=${String(val)}`)
      .join(', ');
    lines.push(`| ${v.system} | ${v.label} | ${settings} | ${b ? n0(b.rate) + (b.timedOut ? ' (timed out)' : '') : '–'} | ${st ? ms(st.lateness.p99) : '–'} |`);
  }
  for (const t of r.tune) {
    const settings = Object.entries(t.settings)
      .map(([k, val]) => `${k}=${String(val)}`)
      .join(', ');
    lines.push(`| timeout-center (tuning) | ${t.variant} | ${settings} | ${n0(t.rate)} | – |`);
  }
  return lines.join('\n');
}

export function charts(r: Results): Record<string, string> {
  const out: Record<string, string> = {};
  if (r.burst.length > 0) {
    out['burst-throughput.svg'] = barChart({
      title: `Burst drain: ${n0(r.meta.burstN)} timeouts due at once`,
      unit: 'timeouts closed per second (higher is better)',
      series: ['timeouts/s'],
      rows: r.burst.map((b) => ({ label: label(r, b.variant), values: [b.rate] })),
    });
    out['burst-lateness.svg'] = barChart({
      title: 'Burst drain: lateness at commit',
      unit: 'seconds (lower is better)',
      series: ['p50', 'p99', 'max'],
      rows: r.burst.map((b) => ({ label: label(r, b.variant), values: [b.lateness.p50, b.lateness.p99, b.lateness.max] })),
      log: true,
    });
  }
  if (r.steady.length > 0) {
    out['steady-lateness.svg'] = barChart({
      title: `Steady arrivals for ${r.meta.durationS} s, each due ${r.meta.delayS} s later`,
      unit: 'lateness at commit, ms (lower is better)',
      series: ['p50', 'p99', 'max'],
      rows: r.steady.map((s) => ({
        label: `${label(r, s.variant)} @ ${n0(s.rate)}/s`,
        values: [s.lateness.p50 * 1000, s.lateness.p99 * 1000, s.lateness.max * 1000],
      })),
      log: true,
    });
    out['steady-backlog.svg'] = lineChart({
      title: 'Steady arrivals: due but not yet closed, over time',
      xUnit: 'seconds since arrivals began',
      yUnit: 'unpaid orders due and not closed',
      series: r.steady.map((s) => ({ label: `${label(r, s.variant)} @ ${n0(s.rate)}/s`, points: s.backlog.map((b) => ({ x: b.t, y: b.n })) })),
    });
  }
  return out;
}

export function writeReport(r: Results, outDir: string, docName = 'benchmarks.md', extraMarkdown = '', appendixMarkdown = ''): string {
  const chartDir = join(outDir, 'bench');
  mkdirSync(chartDir, { recursive: true });
  const svgs = charts(r);
  for (const [name, svg] of Object.entries(svgs)) writeFileSync(join(chartDir, name), svg);
  writeFileSync(join(chartDir, 'results.json'), JSON.stringify(r, null, 2));
  const t = targets(r);
  const md: string[] = [];
  md.push('# Benchmarks');
  md.push('');
  md.push(
    `Generated by \`npm run bench\` (${r.meta.mode}) on ${r.meta.date}: ${r.meta.cpus} CPUs, Node ${r.meta.node}, ${r.meta.postgres}, Redis ${r.meta.redis}. ` +
      "The bench's own PostgreSQL (started by it; settings below) and one Redis on the same box as every process, each system on a fresh database. " +
      'The box is shared with other work, so absolute figures are noisy: compare ratios within one run.',
  );
  md.push('');
  md.push(`Arguments: \`${r.meta.args.join(' ') || '(defaults)'}\`. Raw figures: [bench/results.json](bench/results.json).`);
  md.push('');
  md.push('## Results');
  md.push('');
  md.push(table(r));
  md.push('');
  md.push(
    'Every figure is taken at commit: lateness is pg_xact_commit_timestamp(xmin) - due_at of each closed order (the server runs with track_commit_timestamp = on), ' +
      "and a burst's time runs from the due instant to the last close's commit. Burst lateness is that measure with all due at once, so p50 is about half the drain time; " +
      'steady lateness is the same measure under a constant arrival rate. With several rounds the row is the median round, the range in brackets. Peak RSS is VmHWM of each consumer process during the burst.',
  );
  md.push('');
  if (r.meta.postgresSettings) {
    md.push(
      `PostgreSQL: ${Object.entries(r.meta.postgresSettings)
        .map(([k, v]) => `${k} = ${v}`)
        .join(', ')}.`,
    );
    md.push('');
  }
  const steadyAll = steadyTable(r);
  if (steadyAll) {
    md.push('## Steady arrivals at every rate');
    md.push('');
    md.push(steadyAll);
    md.push('');
  }
  md.push('## Targets');
  md.push('');
  md.push('| target | wanted | measured | met |');
  md.push('|---|---|---|---|');
  for (const x of t) md.push(`| ${x.name} | ${x.target} | ${x.actual} | ${x.met === null ? '–' : x.met ? 'yes' : '**no**'} |`);
  md.push('');
  if (extraMarkdown) {
    md.push(extraMarkdown.trim());
    md.push('');
  }
  const cost = costTable(r);
  if (cost) {
    md.push('## PostgreSQL work per timeout (burst)');
    md.push('');
    md.push(
      "Between the end of loading and the end of the drain (consumer start-up and the bench's once-a-second progress query included). WAL from the instance's " +
        "pg_current_wal_lsn() and pg_stat_wal (the bench owns the instance); rows, buffers and transactions from pg_stat_database of the system's own database; " +
        "non-HOT row versions from pg_stat_user_tables (inserts + updates - HOT updates), each of which adds an entry to its table's indexes (the bound counts every index, partial ones included); " +
        "statements and their time from pg_stat_statements (BEGIN/COMMIT counted; the bench's own statements left out). Unlike timings, these counts do not depend on what else the box is doing.",
    );
    md.push('');
    md.push(cost);
    md.push('');
  }
  const shards = shardTable(r);
  if (shards) {
    md.push("## Where a shard's time goes (timeout-center, burst)");
    md.push('');
    md.push(
      'From timeout_center.shards of the drain: written by the map (created_at), leased by a worker (started_at), committed (pg_xact_commit_timestamp of the shard row, written last in the shard transaction).',
    );
    md.push('');
    md.push(shards);
    md.push('');
    md.push(statementTable(r));
    md.push('');
  }
  md.push('## Charts');
  md.push('');
  for (const name of Object.keys(svgs)) md.push(`![${name.replace('.svg', '')}](bench/${name})`, '');
  if (r.pending) {
    md.push('## Idle cost and pending scale');
    md.push('');
    md.push(
      `One coordinator tick (recovery check, reduce, next-due look-up, lag check every 5th tick), run ${r.pending.empty.ticks} times one second apart, the idle cadence. ` +
        'Statements are counted on the pool (BEGIN/COMMIT included); rows and buffers come from pg_stat_user_tables / pg_statio_user_tables of the timeout_center tables.',
    );
    md.push('');
    md.push(pendingTable(r.pending));
    md.push('');
    const p = r.pending;
    md.push(
      `Storage: ${n0(p.pending)} pending timeouts take ${(p.tableBytes / 1024 ** 2).toFixed(0)} MiB (heap ${(p.heapBytes / 1024 ** 2).toFixed(0)} MiB, indexes ${(p.indexBytes / 1024 ** 2).toFixed(0)} MiB): **${p.bytesPerTimeout.toFixed(0)} bytes per pending timeout**. Inserting them with INSERT ... SELECT generate_series took ${p.insertSeconds.toFixed(0)} s.`,
    );
    md.push('');
    md.push('The next-due look-up with the table full (EXPLAIN ANALYZE, BUFFERS):');
    md.push('');
    md.push('```');
    md.push(p.explain);
    md.push('```');
    md.push('');
  }
  if (r.memory.length > 0) {
    md.push('## Flood memory');
    md.push('');
    md.push(memoryTable(r));
    md.push('');
  }
  md.push('## Settings tried');
  md.push('');
  md.push('Every peer ran in each configuration below; the best per system (burst drain) is the one the targets and the steady workload use.');
  md.push('');
  md.push(settingsTable(r));
  md.push('');
  if (r.meta.notes.length > 0) {
    md.push('## Run notes');
    md.push('');
    for (const n of r.meta.notes) md.push(`- ${n}`);
    md.push('');
  }
  if (appendixMarkdown) {
    md.push(appendixMarkdown.trim());
    md.push('');
  }
  const path = join(outDir, docName);
  writeFileSync(path, md.join('\n'));
  return path;
}
