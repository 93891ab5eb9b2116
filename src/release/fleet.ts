// Which versions of timeout-center are live on a database: the processes of 1.0.0 and later from
// their registry (sql/0024_processes.sql), and those of the code before 1.0.0, which register
// nowhere, from what they leave: live_workers rows no registered process owns, and connections
// whose application_name has no version (`timeout-center worker`, where 1.0.0 and later say
// `timeout-center/1.0.0 worker`). `migrate` reads it before a step that raises the schema's
// oldest code; `status` and the console show it.
import { readSchemaContract, type Db, type SchemaContract } from './schema-contract.js';

export interface LiveProcess {
  /** coordinator, worker, all (run), api, console; for a connection before 1.0.0, its application_name. */
  role: string;
  /** null: the code before 1.0.0 (it does not say). */
  version: string | null;
  host: string;
  /** The process id on its host; for a connection before 1.0.0, the number of its connections. */
  pid: number | null;
  connections?: number;
  source: 'registry' | 'workers' | 'connections';
}

/** application_name of a pool of this build's processes: the version right after the product. */
export function versionedApplicationName(name: string, version: string): string {
  return name.startsWith('timeout-center ') ? `timeout-center/${version} ${name.slice('timeout-center '.length)}` : name;
}

const LEGACY_CONNECTION = '^timeout-center (all|coordinator|worker|api|console)( |$)';

export async function liveProcesses(db: Db): Promise<LiveProcess[]> {
  const { rows: t } = await db.query<{ processes: string | null; workers: string | null }>(
    "SELECT to_regclass('timeout_center.live_processes')::text AS processes, to_regclass('timeout_center.live_workers')::text AS workers",
  );
  const out: LiveProcess[] = [];
  const registered = new Set<string>();
  if (t[0]?.processes) {
    const { rows } = await db.query<{ role: string; version: string; host: string; pid: number }>(
      'SELECT role, version, host, pid FROM timeout_center.live_processes ORDER BY role, host, pid',
    );
    for (const r of rows) {
      registered.add(`${r.host}/${r.pid}`);
      out.push({ role: r.role, version: r.version, host: r.host, pid: r.pid, source: 'registry' });
    }
  }
  if (t[0]?.workers) {
    const { rows } = await db.query<{ host: string; pid: number }>('SELECT host, pid FROM timeout_center.live_workers ORDER BY host, pid');
    for (const r of rows) {
      if (!registered.has(`${r.host}/${r.pid}`)) out.push({ role: 'worker', version: null, host: r.host, pid: r.pid, source: 'workers' });
    }
  }
  const { rows: legacy } = await db.query<{ name: string; host: string; n: number }>(
    `SELECT application_name AS name, coalesce(host(client_addr), 'local socket') AS host, count(*)::int AS n
       FROM pg_stat_activity
      WHERE datname = current_database() AND application_name ~ $1
      GROUP BY 1, 2 ORDER BY 1, 2`,
    [LEGACY_CONNECTION],
  );
  for (const r of legacy) out.push({ role: r.name, version: null, host: r.host, pid: null, connections: r.n, source: 'connections' });
  return out;
}

/** One line per process for people: "worker 1.0.0 on host-a pid 4242". */
export function describeProcess(p: LiveProcess): string {
  const version = p.version ?? 'before 1.0.0';
  if (p.source === 'connections') return `${p.connections} connection(s) named "${p.role}" from ${p.host} (${version})`;
  return `${p.role} ${version} on ${p.host} pid ${p.pid}`;
}

/** What `status` and the console show of a database's release: its schema contract and the
 *  processes live on it. */
export interface ReleaseStatus {
  contract: SchemaContract | null;
  processes: LiveProcess[];
}

export async function readRelease(db: Db): Promise<ReleaseStatus> {
  const [contract, processes] = await Promise.all([readSchemaContract(db), liveProcesses(db)]);
  return { contract, processes };
}
