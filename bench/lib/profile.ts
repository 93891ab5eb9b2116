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
}

/** Resets the counters of the instance (call from a database where the extension exists). */
export async function resetStatements(pool: pg.Pool): Promise<void> {
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await pool.query('SELECT pg_stat_statements_reset()');
}

export async function topStatements(pool: pg.Pool, instance: string, limit = 12): Promise<StatementProfile[]> {
  const { rows } = await pool.query<{ query: string; calls: string; total: number; plan: number; mean: number; rows: string }>(
    `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time AS total, total_plan_time AS plan, mean_exec_time AS mean, rows
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
      `    ${String(r.totalMs).padStart(7)} ms ${String(r.calls).padStart(6)} calls ${String(r.meanMs).padStart(8)} ms/call ${String(r.planMs).padStart(6)} ms planning  ${r.query}`,
    );
}
