// A pg_auto_failover formation for failover tests (Debian's postgresql-15-auto-failover): a
// monitor and two data nodes, each a `pg_autoctl ... --run` process tree run as the postgres user
// on free ports in a temp directory. The monitor's health checks are tightened (1 s period, a node
// unhealthy after 2 s, the old primary's demote timeout 2 s) so a failover takes seconds, not the
// defaults' ~30 s. kill() SIGKILLs a node's keeper and its PostgreSQL: a machine that died.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort, postmasterPid, registerStop } from './servers.js';

const run = promisify(execFile);
const PG_BIN = '/usr/lib/postgresql/15/bin';

export interface AutoFailoverNode {
  name: string;
  port: number;
  pgdata: string;
}

export interface Formation {
  monitorPort: number;
  nodes: AutoFailoverNode[];
  /** postgres://postgres@127.0.0.1:p1,127.0.0.1:p2/<database>?target_session_attrs=read-write&connect_timeout=2 */
  url(database: string): string;
  /** Node name -> the monitor's reported state (primary, secondary, ...). */
  states(): Promise<Record<string, { reported: string; goal: string }>>;
  /** The node the monitor has as primary now. */
  primary(): Promise<AutoFailoverNode>;
  /** SIGKILL of the node's pg_autoctl processes and its postmaster. */
  kill(node: AutoFailoverNode): Promise<void>;
  /** Starts a killed node's keeper again (`pg_autoctl run`): it rejoins as a secondary of the
   *  new primary (pg_rewind or a new base backup, as pg_autoctl decides). */
  rejoin(node: AutoFailoverNode): Promise<void>;
  /** Makes `node` an asynchronous standby (replication-quorum false: the primary stops waiting for it). */
  asynchronous(node: AutoFailoverNode): Promise<void>;
  stop(): Promise<void>;
}

async function query<T extends pg.QueryResultRow>(port: number, database: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/${database}`, connectionTimeoutMillis: 2000 });
  c.on('error', () => {});
  try {
    await c.connect();
    return (await c.query<T>(text, values)).rows;
  } finally {
    await c.end().catch(() => {});
  }
}

/** How long a killed node may take to rejoin as a secondary; the tests that rejoin one allow for it. */
export const REJOIN_MS = 120_000;

async function until(what: string, test: () => Promise<boolean>, timeoutMs: number, every?: () => Promise<unknown>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await test().catch(() => false)) return;
    await every?.().catch(() => {});
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`pg_auto_failover: ${what} not within ${timeoutMs} ms`);
}

/** Pids of processes whose command line names `pgdata` (pg_autoctl ... --pgdata), with every
 *  descendant: the keeper's sub-processes rename themselves ("pg_autoctl: node active",
 *  "pg_autoctl: start/stop postgres") and one left alive would start PostgreSQL again. */
function autoctlPids(pgdata: string): number[] {
  const parent = new Map<number, number>();
  const roots: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      parent.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (cmd.some((a) => a.includes('pg_autoctl')) && cmd.includes(pgdata)) roots.push(Number(entry));
    } catch {
      // gone
    }
  }
  const all = new Set(roots);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, ppid] of parent) {
      if (!all.has(pid) && all.has(ppid)) {
        all.add(pid);
        grew = true;
      }
    }
  }
  return [...all];
}

/** Starts a monitor and two nodes (node1 primary, node2 synchronous secondary) with `database`. */
export async function startFormation(database: string): Promise<Formation> {
  const dir = mkdtempSync(join(tmpdir(), 'tc-pgaf-'));
  const { stdout: uid } = await run('id', ['-u', 'postgres']);
  const { stdout: gid } = await run('id', ['-g', 'postgres']);
  chownSync(dir, Number(uid.trim()), Number(gid.trim()));
  const env = [`XDG_CONFIG_HOME=${dir}/config`, `XDG_DATA_HOME=${dir}/share`, `XDG_RUNTIME_DIR=${dir}/run`, `PG_CONFIG=${PG_BIN}/pg_config`, `HOME=${dir}`];
  const children: ChildProcess[] = [];
  const autoctl = (name: string, args: string[]): ChildProcess => {
    const child = spawn('runuser', ['-u', 'postgres', '--', 'env', ...env, 'pg_autoctl', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr!.setEncoding('utf8').on('data', (c: string) => {
      log = (log + c).slice(-20_000);
    });
    child.once('error', () => {});
    Object.defineProperty(child, 'log', { get: () => log });
    children.push(child);
    void name;
    return child;
  };
  const monitorPort = await freePort();
  const monitorData = join(dir, 'monitor');
  const common = ['--hostname', '127.0.0.1', '--auth', 'trust', '--no-ssl', '--pgctl', `${PG_BIN}/pg_ctl`];
  autoctl('monitor', ['create', 'monitor', '--pgdata', monitorData, '--pgport', String(monitorPort), ...common, '--run']);
  await until('the monitor', async () => (await query(monitorPort, 'pg_auto_failover', 'SELECT 1 FROM pgautofailover.formation')).length > 0, 60_000);
  for (const [k, v] of Object.entries({
    health_check_period: 1000,
    health_check_timeout: 1000,
    health_check_max_retries: 1,
    health_check_retry_delay: 500,
    node_considered_unhealthy_timeout: 2000,
    primary_demote_timeout: 2000,
  })) {
    await query(monitorPort, 'pg_auto_failover', `ALTER SYSTEM SET pgautofailover.${k} = ${v}`);
  }
  await query(monitorPort, 'pg_auto_failover', 'SELECT pg_reload_conf()');
  const monitorUrl = `postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable`;

  const nodes: AutoFailoverNode[] = [];
  const states = async () =>
    Object.fromEntries(
      (
        await query<{ nodename: string; reportedstate: string; goalstate: string }>(
          monitorPort,
          'pg_auto_failover',
          'SELECT nodename, reportedstate, goalstate FROM pgautofailover.node',
        )
      ).map((r) => [r.nodename, { reported: r.reportedstate, goal: r.goalstate }]),
    );
  const addNode = async (name: string, wantState: string) => {
    const node = { name, port: await freePort(), pgdata: join(dir, name) };
    nodes.push(node);
    autoctl(name, [
      'create',
      'postgres',
      '--pgdata',
      node.pgdata,
      '--pgport',
      String(node.port),
      ...common,
      '--monitor',
      monitorUrl,
      '--name',
      name,
      '--dbname',
      database,
      '--run',
    ]);
    // pg_autoctl's pg_basebackup waits for a spread checkpoint on the primary: ask for it now.
    const primary = nodes[0]!;
    await until(
      `${name} ${wantState}`,
      async () => (await states())[name]?.reported === wantState,
      120_000,
      () => (name === primary.name ? Promise.resolve() : query(primary.port, 'postgres', 'CHECKPOINT')),
    );
  };
  await addNode('node1', 'single');
  await addNode('node2', 'secondary');
  await until('node1 primary', async () => (await states())['node1']?.reported === 'primary', 60_000);

  const formation: Formation = {
    monitorPort,
    nodes,
    url: (db) => `postgres://postgres@${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}/${db}?target_session_attrs=read-write&connect_timeout=2`,
    states,
    async primary() {
      const s = await states();
      // The goal state: a dead node keeps the state it last reported, its goal says what the monitor decided.
      const name = Object.keys(s).find((n) => ['primary', 'wait_primary', 'single'].includes(s[n]!.goal));
      const node = nodes.find((n) => n.name === name);
      if (!node) throw new Error(`no primary: ${JSON.stringify(s)}`);
      return node;
    },
    async kill(node) {
      const pids = [...autoctlPids(node.pgdata), postmasterPid(node.pgdata)].filter((p): p is number => p !== undefined);
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    },
    async rejoin(node) {
      const keeper = autoctl(node.name, ['run', '--pgdata', node.pgdata]);
      const primary = await formation.primary();
      try {
        await until(
          `${node.name} secondary again`,
          async () => {
            const st = await states();
            return st[node.name]?.reported === 'secondary' && st[primary.name]?.reported === 'primary';
          },
          REJOIN_MS,
          () => query(primary.port, 'postgres', 'CHECKPOINT'),
        );
      } catch (err) {
        // What the monitor says and what the keeper last logged: the wait alone says nothing.
        const st = await states().catch((e: Error) => `states unreadable: ${e.message}`);
        const log = (keeper as ChildProcess & { log: string }).log.split('\n').slice(-30).join('\n');
        throw new Error(
          `${(err as Error).message}; states ${JSON.stringify(st)}; ${node.name}'s keeper (exit ${String(keeper.exitCode)}) last logged:\n${log}`,
          {
            cause: err,
          },
        );
      }
    },
    async asynchronous(node) {
      await run('runuser', ['-u', 'postgres', '--', 'env', ...env, 'pg_autoctl', 'set', 'node', 'replication-quorum', 'false', '--pgdata', node.pgdata], {
        timeout: 60_000,
      });
      const primary = await formation.primary();
      await until(
        'synchronous_standby_names empty',
        async () => (await query<{ s: string }>(primary.port, 'postgres', `SELECT current_setting('synchronous_standby_names') AS s`))[0]!.s === '',
        30_000,
      );
    },
    async stop() {
      // Kill until nothing of the formation is left (a supervisor may start PostgreSQL again
      // between two sweeps), then remove the directory.
      const deadline = Date.now() + 10_000;
      for (;;) {
        const pids = [...nodes.map((n) => n.pgdata), monitorData]
          .flatMap((d) => [...autoctlPids(d), postmasterPid(d)])
          .filter((p): p is number => p !== undefined);
        const alive = pids.filter((pid) => {
          try {
            process.kill(pid, 'SIGKILL');
            return true;
          } catch {
            return false;
          }
        });
        if (alive.length === 0 || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 300));
      }
      for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
  registerStop(formation.stop);
  return formation;
}
