// --profile for bench:external and bench:stores: where a burst's time goes. On each private
// instance: pg_stat_statements (loaded at start, reset before the burst) gives each statement's
// calls and time inside PostgreSQL (lock waits included); a sampler reads pg_stat_activity every
// 20 ms (what the timeout-center backends are doing: running, waiting on a lock, idle in a
// transaction, idle); /proc gives the CPU seconds of each instance's processes and of the node
// processes. Only the bench turns it on: the product never loads anything for it.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import type { PostgresServer } from '../../test/helpers/servers.ts';

const TICK = 100; // USER_HZ on Linux

/** Loads pg_stat_statements on the instance (a restart). */
export async function enableProfiling(server: PostgresServer): Promise<void> {
  const c = new pg.Client({ connectionString: server.url() });
  c.on('error', () => {});
  await c.connect();
  await c.query(`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`);
  await c.query(`ALTER SYSTEM SET track_io_timing = on`);
  await c.end();
  await server.restart('fast');
  // Planning time too (the product sends its statements unprepared, so each call is planned): a
  // setting of the library, known once it is loaded.
  const after = new pg.Client({ connectionString: server.url() });
  after.on('error', () => {});
  await after.connect();
  await after.query(`ALTER SYSTEM SET pg_stat_statements.track_planning = on`);
  await after.query('SELECT pg_reload_conf()');
  await after.end();
}

function cpuOf(pid: number, withChildren: boolean): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields after ")" start at index 3 (state): utime 14, stime 15, cutime 16, cstime 17 (1-based)
    const ut = Number(f[11]);
    const st = Number(f[12]);
    const cut = Number(f[13]);
    const cst = Number(f[14]);
    return (ut + st + (withChildren ? cut + cst : 0)) / TICK;
  } catch {
    return 0;
  }
}

function ppidOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return -1;
  }
}

/** CPU seconds of an instance: the postmaster, its reaped children, and its live children. */
export function instanceCpu(server: PostgresServer): number {
  const pid = Number(readFileSync(join(server.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  let total = cpuOf(pid, true);
  for (const d of readdirSync('/proc')) {
    const p = Number(d);
    if (Number.isInteger(p) && p > 0 && ppidOf(p) === pid) total += cpuOf(p, false);
  }
  return total;
}

/** CPU seconds of a process (a node child), itself only. */
export function processCpu(pid: number | undefined): number {
  return pid ? cpuOf(pid, false) : 0;
}

export interface StatementProfile {
  instance: string;
  query: string;
  calls: number;
  totalMs: number;
  /** planning, apart from totalMs (execution) */
  planMs: number;
  meanMs: number;
  rows: number;
  /** shared buffers hit or read: a statement that walks past rows it does not take reads more per row */
  blocks: number;
}

/** Resets the counters of the instance (call from a database where the extension exists). */
export async function resetStatements(pool: pg.Pool): Promise<void> {
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await pool.query('SELECT pg_stat_statements_reset()');
}

export async function topStatements(pool: pg.Pool, instance: string, limit = 12): Promise<StatementProfile[]> {
  const { rows } = await pool.query<{ query: string; calls: string; total: number; plan: number; mean: number; rows: string; blocks: string }>(
    `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time AS total, total_plan_time AS plan, mean_exec_time AS mean, rows,
            shared_blks_hit + shared_blks_read AS blocks
       FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = current_database() ORDER BY total_exec_time DESC LIMIT $1`,
    [limit],
  );
  return rows.map((r) => ({
    instance,
    query: r.query.slice(0, 110),
    calls: Number(r.calls),
    totalMs: Math.round(r.total),
    planMs: Math.round(r.plan),
    meanMs: Number(r.mean.toFixed(3)),
    rows: Number(r.rows),
    blocks: Number(r.blocks),
  }));
}

/** Samples what the product's backends on an instance are doing, every 20 ms, until stopped. */
export class ActivitySampler {
  private readonly counts = new Map<string, number>();
  private samples = 0;
  private stopped = false;
  private done: Promise<void> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    /** the database(s) of the instance whose backends are counted */
    private readonly database: string | string[],
  ) {}

  start(): void {
    this.done = (async () => {
      while (!this.stopped) {
        const { rows } = await this.pool
          .query<{ what: string; n: number }>(
            `SELECT CASE WHEN state = 'active' AND wait_event_type IS NULL THEN 'running'
                         WHEN state = 'active' THEN 'waiting: ' || wait_event_type || '/' || wait_event
                         ELSE state END AS what, count(*)::int AS n
               FROM pg_stat_activity WHERE datname = ANY ($1::text[]) AND application_name LIKE 'timeout-center%' GROUP BY 1`,
            [typeof this.database === 'string' ? [this.database] : this.database],
          )
          .catch(() => ({ rows: [] as { what: string; n: number }[] }));
        this.samples += 1;
        for (const r of rows) this.counts.set(r.what, (this.counts.get(r.what) ?? 0) + r.n);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
  }

  /** Average number of backends in each state over the samples. */
  async stop(): Promise<Record<string, number>> {
    this.stopped = true;
    await this.done;
    const out: Record<string, number> = {};
    for (const [k, v] of [...this.counts].sort((a, b) => b[1] - a[1])) out[k] = Number((v / Math.max(1, this.samples)).toFixed(2));
    return out;
  }
}

export function printStatements(title: string, rows: StatementProfile[]): void {
  console.log(`  ${title}`);
  for (const r of rows)
    console.log(
      `    ${String(r.totalMs).padStart(7)} ms ${String(r.calls).padStart(6)} calls ${String(r.meanMs).padStart(8)} ms/call ${String(r.planMs).padStart(6)} ms planning ${String(r.blocks).padStart(9)} blocks ${String(r.rows).padStart(7)} rows  ${r.query}`,
    );
}

/** Each live process of an instance (the postmaster's children) with its CPU seconds so far and a
 *  label from pg_stat_activity: backend type, and for client backends the application name (the
 *  product's pools name themselves; Citus's connections between nodes are `citus_internal ...`). */
export interface ProcessSnapshot {
  /** the postmaster's own CPU and its reaped children's (processes that exited) */
  postmasterWithReaped: number;
  byPid: Map<number, { label: string; cpu: number }>;
}

function postmasterPid(server: PostgresServer): number {
  return Number(readFileSync(join(server.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/** The label of a process: "client: <application_name>" (gpid suffixes cut), or its backend type. */
function labelOf(backendType: string | null, app: string | null): string {
  if (backendType === 'client backend') return `client: ${(app ?? '').replace(/ gpid=\d+/, '').replace(/\s+\(.*\)$/, '') || '(no name)'}`;
  return backendType ?? 'other';
}

export async function snapshotProcesses(server: PostgresServer): Promise<ProcessSnapshot> {
  const c = new pg.Client({ connectionString: server.url() });
  c.on('error', () => {});
  await c.connect();
  let labels: Map<number, string>;
  try {
    const { rows } = await c.query<{ pid: number; backend_type: string | null; application_name: string | null }>(
      'SELECT pid, backend_type, application_name FROM pg_stat_activity',
    );
    labels = new Map(rows.map((r) => [r.pid, labelOf(r.backend_type, r.application_name)]));
  } finally {
    await c.end().catch(() => {});
  }
  const pm = postmasterPid(server);
  const byPid = new Map<number, { label: string; cpu: number }>();
  for (const d of readdirSync('/proc')) {
    const p = Number(d);
    if (Number.isInteger(p) && p > 0 && ppidOf(p) === pm)
      byPid.set(p, { label: labels.get(p) ?? 'other (checkpointer, walwriter, ...)', cpu: cpuOf(p, false) });
  }
  return { postmasterWithReaped: cpuOf(pm, true), byPid };
}

/** CPU seconds per process label between two snapshots (a process seen only at the end counts
 *  from zero; one that exited in between is in `exited`, through the postmaster's cutime). */
export function cpuByLabel(before: ProcessSnapshot, after: ProcessSnapshot): Record<string, number> {
  const out: Record<string, number> = {};
  const add = (k: string, v: number) => (out[k] = (out[k] ?? 0) + v);
  for (const [pid, a] of after.byPid) add(a.label, a.cpu - (before.byPid.get(pid)?.cpu ?? 0));
  // live at the start, gone at the end: their CPU up to the start was in `before`; the rest is in
  // the postmaster's cutime delta
  let goneBefore = 0;
  for (const [pid, b] of before.byPid) if (!after.byPid.has(pid)) goneBefore += b.cpu;
  add('exited during the run (reaped)', after.postmasterWithReaped - before.postmasterWithReaped - goneBefore);
  for (const k of Object.keys(out)) out[k] = Number(out[k]!.toFixed(2));
  return Object.fromEntries(Object.entries(out).sort((x, y) => y[1] - x[1]));
}

export interface PlannedStatement extends StatementProfile {
  planMs: number;
}

/** Statements of the current database by plan + execution time (pg_stat_statements with
 *  track_planning), and the sums over all of them: calls, plan and execution time, and the two
 *  phases of two-phase commits (PREPARE TRANSACTION, COMMIT PREPARED; track_utility). */
export async function statementTotals(
  pool: pg.Pool,
  instance: string,
  limit = 15,
): Promise<{ top: PlannedStatement[]; calls: number; planMs: number; execMs: number; prepares: number; commitPrepared: number }> {
  const { rows } = await pool.query<{ query: string; calls: string; plan: number; total: number; rows: string; blocks: string }>(
    `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_plan_time AS plan, total_exec_time AS total, rows,
            shared_blks_hit + shared_blks_read AS blocks
       FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = current_database()`,
  );
  const all = rows.map((r) => ({
    instance,
    query: r.query.slice(0, 160),
    calls: Number(r.calls),
    planMs: Math.round(r.plan),
    totalMs: Math.round(r.total),
    meanMs: Number((r.total / Math.max(1, Number(r.calls))).toFixed(3)),
    rows: Number(r.rows),
    blocks: Number(r.blocks),
    full: r.query,
  }));
  const sum = (f: (x: (typeof all)[number]) => number, w: (x: (typeof all)[number]) => boolean = () => true) => all.filter(w).reduce((a, x) => a + f(x), 0);
  return {
    top: [...all]
      .sort((a, b) => b.planMs + b.totalMs - (a.planMs + a.totalMs))
      .slice(0, limit)
      .map(({ full: _full, ...x }) => x),
    calls: sum((x) => x.calls),
    planMs: Math.round(sum((x) => x.planMs)),
    execMs: Math.round(sum((x) => x.totalMs)),
    prepares: sum(
      (x) => x.calls,
      (x) => /^PREPARE TRANSACTION/i.test(x.full),
    ),
    commitPrepared: sum(
      (x) => x.calls,
      (x) => /^COMMIT PREPARED/i.test(x.full),
    ),
  };
}

/** Each shard of a burst as ms after its due instant D: leased (started_at), claimed (the
 *  external claim's claimed_at; the same-database claim is its record, so none), finished; with
 *  its size. Shows where a burst's wall time goes that CPU seconds do not: a slot idle between
 *  shards, a late first lease, a last shard running alone. */
export async function printShardTimeline(pool: pg.Pool, due: Date): Promise<void> {
  const { rows } = await pool.query<{
    id: string;
    size: number;
    published: number | null;
    started: number | null;
    claimed: number | null;
    finished: number | null;
  }>(
    `SELECT id, size,
            extract(epoch FROM published_at - $1::timestamptz) * 1000 AS published,
            extract(epoch FROM started_at - $1::timestamptz) * 1000 AS started,
            extract(epoch FROM claimed_at - $1::timestamptz) * 1000 AS claimed,
            extract(epoch FROM finished_at - $1::timestamptz) * 1000 AS finished
       FROM timeout_center.shards WHERE finished_at >= $1::timestamptz AND size > 0 ORDER BY started_at`,
    [due],
  );
  const ms = (v: number | string | null) => (v === null ? '     -' : String(Math.round(Number(v))).padStart(6));
  console.log('  shards (ms after D): published, leased, claimed, finished, rows, µs per row while running');
  for (const r of rows) {
    const per = r.started !== null && r.finished !== null ? (((Number(r.finished) - Number(r.started)) * 1000) / r.size).toFixed(1) : '-';
    console.log(
      `    ${String(r.id).padStart(5)} ${ms(r.published)} ${ms(r.started)} ${ms(r.claimed)} ${ms(r.finished)} ${String(r.size).padStart(6)} ${per.padStart(6)}`,
    );
  }
}
