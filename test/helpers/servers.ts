// Private servers for fault tests that kill, stall or restart PostgreSQL or Redis. They run on free
// ports in temp directories and never touch the machine's shared services. Every server started
// here is tracked, and stopAllServers() (call it from afterAll) removes whatever is still running.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);

/** A TCP port nobody listens on right now (the kernel picks it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

async function waitUntil(what: string, test: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await test().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} not ready within ${timeoutMs} ms`);
}

function portAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
}

const stops = new Set<() => Promise<void>>();

/** Tracks a server started elsewhere (redis-ha.ts) so stopAllServers() stops it too. */
export function registerStop(stop: () => Promise<void>): void {
  stops.add(stop);
}

/** Stops every server this file started (afterAll, also when a test failed). */
export async function stopAllServers(): Promise<void> {
  for (const stop of [...stops]) await stop().catch(() => {});
  stops.clear();
}

// ---------------------------------------------------------------------------------------------
// Redis

export interface RedisServer {
  port: number;
  url: string;
  readonly pid: number | undefined;
  /** SIGKILL the server (no persistence: its data is gone). */
  kill(): Promise<void>;
  /** Starts it again on the same port, empty. */
  start(): Promise<void>;
  /** Runs redis-cli against it, e.g. cli('DEBUG', 'SLEEP', '5'). */
  cli(...args: string[]): Promise<string>;
  stop(): Promise<void>;
}

export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const launch = async () => {
    child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--enable-debug-command', 'yes'],
      { stdio: 'ignore' },
    );
    child.once('error', () => {});
    await waitUntil(`redis-server on port ${port}`, async () => (await redis.cli('PING')) === 'PONG', 10_000);
  };
  const kill = async () => {
    const c = child;
    child = undefined;
    if (c && c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await once(c, 'exit');
    }
  };
  const redis: RedisServer = {
    port,
    url: `redis://127.0.0.1:${port}`,
    get pid() {
      return child?.pid;
    },
    kill,
    start: launch,
    async cli(...args) {
      const { stdout } = await run('redis-cli', ['-p', String(port), ...args], { timeout: 30_000 });
      return stdout.trim();
    },
    async stop() {
      stops.delete(redis.stop);
      await kill();
    },
  };
  stops.add(redis.stop);
  await launch();
  return redis;
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

export interface PostgresServer {
  port: number;
  dir: string;
  /** The data directory. */
  data: string;
  /** postgres://postgres@127.0.0.1:<port>/<database> */
  url(database?: string): string;
  /** pg_ctl restart -m <mode> (immediate: a crash, recovery on start; see stopImmediately). */
  restart(mode?: 'immediate' | 'fast'): Promise<void>;
  /** pg_ctl stop -m immediate (a crash: every backend killed, recovery on start), within seconds
   *  whatever clients do. PostgreSQL 15's postmaster SIGKILLs its children 5 s after SIGQUIT, but
   *  never a "dead-end" child (forked to refuse a connection that arrived during the shutdown),
   *  which waits up to authentication_timeout (60 s) for the client's startup packet: a Citus
   *  peer's half-open connection held a node's stop past 60 s in CI. Children left after 6 s are
   *  such and are SIGKILLed here, as PostgreSQL 18's postmaster does itself. */
  stopImmediately(): Promise<void>;
  pgCtl(...args: string[]): Promise<void>;
  /** pg_ctl start, then waits until it accepts connections (a standby: read-only ones). */
  start(): Promise<void>;
  /** SIGKILL of the postmaster (its backends exit when they notice): a machine that died. */
  kill(): Promise<void>;
  /** pg_ctl promote -w: a standby becomes a primary on a new timeline. */
  promote(): Promise<void>;
  /** With the server stopped: makes it a streaming standby of `primary` (standby.signal and
   *  primary_conninfo), then starts it. */
  followAs(primary: PostgresServer): Promise<void>;
  /** SELECT pg_is_in_recovery(). */
  inRecovery(): Promise<boolean>;
  stop(): Promise<void>;
}

function pgBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))) : [];
  const v = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!v) throw new Error(`no PostgreSQL server binaries under ${root} (apt-get install -y postgresql)`);
  return join(root, v, 'bin');
}

async function postgresUid(): Promise<{ uid: number; gid: number }> {
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
  return { uid, gid };
}

export interface PostgresOptions {
  /** More `-c name=value` settings for the server (e.g. shared_preload_libraries: test/helpers/citus.ts). */
  readonly settings?: Readonly<Record<string, string>>;
}

/** initdb + pg_ctl start as the postgres OS user, on a free port, fsync off (test data only). */
export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresServer> {
  const server = await preparePostgres(async (asPostgres, data) => {
    await asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '-N']);
  }, options);
  await server.start();
  return server;
}

/** A streaming-replication standby of `primary` (pg_basebackup -R, asynchronous), started. */
export async function startStandby(primary: PostgresServer): Promise<PostgresServer> {
  const server = await preparePostgres(async (asPostgres, data) => {
    await asPostgres('pg_basebackup', ['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', data, '-R', '-X', 'stream', '-c', 'fast']);
  });
  await server.start();
  return server;
}

/** The postmaster's pid, from the first line of its data directory's postmaster.pid (absent when
 *  it is not running). */
export function postmasterPid(data: string): number | undefined {
  try {
    return Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]) || undefined;
  } catch {
    return undefined;
  }
}

/** What a failed pg_ctl said, and what the server was doing: its exit (or the timeout that killed
 *  it), its output, the server log's tail and the processes left under the data directory. */
async function pgCtlFailure(err: unknown, dir: string, data: string): Promise<string> {
  const e = (err ?? {}) as { code?: unknown; signal?: unknown; killed?: boolean; stdout?: string; stderr?: string };
  const logTail = (() => {
    try {
      return readFileSync(join(dir, 'server.log'), 'utf8').split('\n').slice(-25).join('\n');
    } catch {
      return '(no server.log)';
    }
  })();
  const pidLine = postmasterPid(data) ?? '(no postmaster.pid)';
  // The postmaster (its command line names the data directory) and its children.
  const ps = await run('ps', ['-eo', 'pid,ppid,stat,etime,args']).then(
    (r) => {
      const rows = r.stdout.split('\n').map((l) => ({ l, f: l.trim().split(/\s+/) }));
      const pms = new Set(rows.filter((x) => x.l.includes(data)).map((x) => x.f[0]));
      return rows
        .filter((x) => pms.has(x.f[0]) || pms.has(x.f[1]))
        .slice(0, 40)
        .map((x) => x.l)
        .join('\n');
    },
    () => '(ps failed)',
  );
  return [
    `exit ${String(e.code)}${e.signal ? `, signal ${String(e.signal)}` : ''}${e.killed ? ' (killed by the 60 s timeout)' : ''}`,
    `stdout: ${(e.stdout ?? '').trim()}`,
    `stderr: ${(e.stderr ?? '').trim()}`,
    `postmaster.pid: ${pidLine}`,
    `server.log (last lines):\n${logTail}`,
    `processes:\n${ps}`,
  ].join('\n');
}

async function preparePostgres(
  create: (asPostgres: (cmd: string, args: string[]) => Promise<unknown>, data: string) => Promise<void>,
  options: PostgresOptions = {},
): Promise<PostgresServer> {
  const bin = pgBinDir();
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tc-pg-'));
  const { uid, gid } = await postgresUid();
  chownSync(dir, uid, gid);
  const data = join(dir, 'data');
  const asPostgres = (cmd: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], { timeout: 60_000 });
  await create(asPostgres, data);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=100${Object.entries(
    options.settings ?? {},
  )
    .map(([k, v]) => ` -c ${k}=${v}`)
    .join('')}`;
  const pgCtl = async (...args: string[]) => {
    try {
      await asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-o', opts, ...args]);
    } catch (err) {
      throw new Error(`pg_ctl ${args.join(' ')} on port ${port} failed: ${await pgCtlFailure(err, dir, data)}`, { cause: err });
    }
  };
  const url = (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`;
  const query = async <T extends pg.QueryResultRow>(text: string): Promise<T[]> => {
    const c = new pg.Client({ connectionString: url() });
    c.on('error', () => {});
    try {
      await c.connect();
      return (await c.query<T>(text)).rows;
    } finally {
      await c.end().catch(() => {});
    }
  };
  const ready = () => waitUntil(`PostgreSQL on port ${port}`, async () => (await query('SELECT 1'), true), 30_000);
  const server: PostgresServer = {
    port,
    dir,
    data,
    url,
    pgCtl,
    async start() {
      await pgCtl('-w', 'start');
      await ready();
    },
    async restart(mode = 'immediate') {
      if (mode === 'immediate') {
        await server.stopImmediately();
        await server.start();
        return;
      }
      await pgCtl('-w', '-m', mode, 'restart');
      await ready();
    },
    async stopImmediately() {
      const pidFile = join(data, 'postmaster.pid');
      const postmaster = postmasterPid(data);
      if (!postmaster) throw new Error(`PostgreSQL on port ${port} is not running (no ${pidFile})`);
      await pgCtl('-W', '-m', 'immediate', 'stop');
      const started = Date.now();
      let killedDeadEnds = false;
      // The postmaster removes its pid file as it exits (what pg_ctl -w waits for).
      while (existsSync(pidFile)) {
        const waited = Date.now() - started;
        if (waited > 30_000) {
          throw new Error(`PostgreSQL on port ${port} still running 30 s after stop -m immediate: ${await pgCtlFailure(undefined, dir, data)}`);
        }
        if (waited > 6_000 && !killedDeadEnds) {
          killedDeadEnds = true;
          const { stdout } = await run('ps', ['-o', 'pid=', '--ppid', String(postmaster)]).catch(() => ({ stdout: '' }));
          for (const pid of stdout
            .split('\n')
            .map(Number)
            .filter((n) => n > 0)) {
            try {
              process.kill(pid, 'SIGKILL');
            } catch {
              // gone meanwhile
            }
          }
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async kill() {
      const pid = postmasterPid(data);
      if (!pid) throw new Error(`PostgreSQL on port ${port} is not running (no postmaster.pid)`);
      process.kill(pid, 'SIGKILL');
      await waitUntil(`postmaster ${pid} gone`, async () => !(await portAnswers(port)), 10_000);
    },
    async promote() {
      await pgCtl('-w', 'promote');
      await waitUntil(`PostgreSQL on port ${port} promoted`, async () => !(await server.inRecovery()), 30_000);
    },
    async followAs(primary) {
      const conninfo = `host=127.0.0.1 port=${primary.port} user=postgres application_name=standby_${port}`;
      await run('runuser', [
        '-u',
        'postgres',
        '--',
        'sh',
        '-c',
        `touch ${data}/standby.signal && echo "primary_conninfo = '${conninfo}'" >> ${data}/postgresql.auto.conf`,
      ]);
      await server.start();
    },
    async inRecovery() {
      return (await query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r'))[0]!.r;
    },
    async stop() {
      stops.delete(server.stop);
      if (existsSync(join(data, 'postmaster.pid'))) await server.stopImmediately().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
  stops.add(server.stop);
  return server;
}
