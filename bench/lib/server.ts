// The bench's own PostgreSQL: initdb in a temp dir (as the postgres OS user), started on a free
// port with the settings below, stopped and removed at the end. Owning the instance makes runs
// comparable across machines (the settings are written in the report), lets the bench turn on
// track_commit_timestamp (every system's end time and lateness are read at commit:
// pg_xact_commit_timestamp(xmin) of each closed order) and pg_stat_statements (where the time goes
// per shard), and makes instance-wide counters such as WAL bytes belong to the system measured.
//
// BENCH_DATABASE_URL points the bench at an existing server instead (it must have
// track_commit_timestamp = on; the bench says so and stops otherwise).
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../../test/helpers/servers.ts';
import { uniqueName } from '../../test/helpers/services.ts';

const run = promisify(execFile);

/** Settings of the bench's instance. Durable commits (fsync, synchronous_commit on, full page
 *  writes): what a production server does. Checkpoints spaced so that none falls inside a drain
 *  by the clock (the bench also runs CHECKPOINT before each drain). */
export const BENCH_PG_SETTINGS: Record<string, string> = {
  fsync: 'on',
  synchronous_commit: 'on',
  full_page_writes: 'on',
  shared_buffers: '1GB',
  max_wal_size: '8GB',
  // Keep the WAL segment files written by the warm-up (warmWal) for reuse: see there.
  min_wal_size: '4GB',
  checkpoint_timeout: '30min',
  wal_buffers: '16MB',
  track_commit_timestamp: 'on',
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track': 'all',
  max_connections: '200',
  // Autovacuum as shipped: a table filled and drained in seconds is what production sees too.
};

/** The settings reported (read back from the running server, so BENCH_DATABASE_URL is described truthfully). */
const REPORTED = [
  'server_version',
  'fsync',
  'synchronous_commit',
  'full_page_writes',
  'shared_buffers',
  'min_wal_size',
  'max_wal_size',
  'checkpoint_timeout',
  'wal_buffers',
  'track_commit_timestamp',
  'autovacuum',
  'max_connections',
  'max_prepared_transactions',
];

export interface BenchServer {
  /** postgres://…/postgres */
  adminUrl: string;
  /** started by the bench (false: BENCH_DATABASE_URL) */
  owned: boolean;
  settings: Record<string, string>;
  hasStatStatements: boolean;
  createDatabase(label: string): Promise<{ name: string; url: string; drop(): Promise<void> }>;
  stop(): Promise<void>;
}

function pgBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))) : [];
  const v = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!v)
    throw new Error(
      `no PostgreSQL server binaries under ${root} (apt-get install -y postgresql), or set BENCH_DATABASE_URL to a server with track_commit_timestamp = on`,
    );
  return join(root, v, 'bin');
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** WAL written before the first run by default, in bytes: more than a 1,000,000 burst writes from
 *  its loading to the end of its drain. */
export const WAL_WARMUP_BYTES = 2 * 1024 ** 3;

/**
 * A new cluster has a handful of WAL segment files. The first drain that writes past them creates
 * and zero-fills new 16 MB files on its way, and its commits wait for that: the first system of a
 * 1,000,000 run (always timeout-center's defaults) committed 2.5x slower than the same system in
 * later rounds (1.3 s of commits against 0.4-0.5 s). Writing WAL_WARMUP_BYTES once and
 * checkpointing leaves the segments recycled (min_wal_size keeps them), so every system, first or
 * last, writes into existing files, as on a server that has been running for a while.
 */
async function warmWal(adminUrl: string, bytes: number): Promise<string> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const started = Date.now();
    const { rows } = await c.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    await c.query('CREATE TABLE bench_wal_warmup (g bigint, pad text)');
    let written = 0;
    while (written < bytes) {
      await c.query(`INSERT INTO bench_wal_warmup SELECT g, repeat('x', 200) FROM generate_series(1, 1000000) g`);
      await c.query('TRUNCATE bench_wal_warmup');
      const w = await c.query<{ bytes: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS bytes', [rows[0]!.lsn]);
      written = Number(w.rows[0]!.bytes);
    }
    await c.query('DROP TABLE bench_wal_warmup');
    await c.query('CHECKPOINT');
    return `${(written / 1024 ** 3).toFixed(1)} GB written and checkpointed before the first run (${((Date.now() - started) / 1000).toFixed(0)} s)`;
  } finally {
    await c.end();
  }
}

async function readSettings(adminUrl: string): Promise<{ settings: Record<string, string>; hasStatStatements: boolean }> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const { rows } = await c.query<{ name: string; v: string }>(
      `SELECT name, CASE WHEN unit IS NULL OR unit = '' THEN setting ELSE current_setting(name) END AS v FROM pg_settings WHERE name = ANY ($1)`,
      [REPORTED],
    );
    const settings = Object.fromEntries(REPORTED.map((n) => [n, rows.find((r) => r.name === n)?.v ?? '?']));
    const pss = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_settings WHERE name = 'shared_preload_libraries' AND setting LIKE '%pg_stat_statements%'`,
    );
    return { settings, hasStatStatements: pss.rows[0]!.n > 0 };
  } finally {
    await c.end();
  }
}

function databases(adminUrl: string, hasStatStatements: boolean): BenchServer['createDatabase'] {
  return async (label) => {
    const name = uniqueName(label);
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } finally {
      await admin.end();
    }
    const url = withDatabase(adminUrl, name);
    if (hasStatStatements) {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements').finally(() => c.end());
    }
    return {
      name,
      url,
      async drop() {
        const c = new pg.Client({ connectionString: adminUrl });
        await c.connect();
        try {
          for (let i = 0; i < 25; i += 1) {
            const { rows } = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [name]);
            if (rows[0]!.n === 0) break;
            await new Promise((r) => setTimeout(r, 200));
          }
          await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        } finally {
          await c.end();
        }
      },
    };
  };
}

/** walWarmupBytes: WAL to write before the first run (see warmWal; 0 for a smoke run); settings:
 *  over BENCH_PG_SETTINGS, for the instance the bench starts (not applied to BENCH_DATABASE_URL's,
 *  whose own settings are reported). */
export async function startBenchServer(options: { walWarmupBytes?: number; settings?: Record<string, string> } = {}): Promise<BenchServer> {
  const external = process.env['BENCH_DATABASE_URL'];
  if (external) {
    const { settings, hasStatStatements } = await readSettings(external);
    if (settings['track_commit_timestamp'] !== 'on') {
      throw new Error(
        `BENCH_DATABASE_URL: track_commit_timestamp is off on that server; the bench reads every end time at commit. Set it on (postgresql.conf, restart) or unset BENCH_DATABASE_URL to let the bench start its own server`,
      );
    }
    return { adminUrl: external, owned: false, settings, hasStatStatements, createDatabase: databases(external, hasStatStatements), stop: async () => {} };
  }
  const bin = pgBinDir();
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tc-bench-pg-'));
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
  chownSync(dir, uid, gid);
  const data = join(dir, 'data');
  const asPostgres = (cmd: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], { timeout: 120_000 });
  await asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres']);
  const opts = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    ...Object.entries({ ...BENCH_PG_SETTINGS, ...options.settings }).map(([k, v]) => `-c ${k}=${v}`),
  ].join(' ');
  const pgCtl = (...args: string[]) => asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-o', opts, ...args]);
  await pgCtl('-w', 'start');
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await pgCtl('-w', '-m', 'fast', 'stop').catch(() => pgCtl('-w', '-m', 'immediate', 'stop').catch(() => {}));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const warmupBytes = options.walWarmupBytes ?? WAL_WARMUP_BYTES;
    const warmup = warmupBytes > 0 ? await warmWal(adminUrl, warmupBytes) : 'none';
    const { settings, hasStatStatements } = await readSettings(adminUrl);
    settings['wal_warmup'] = warmup;
    return { adminUrl, owned: true, settings, hasStatStatements, createDatabase: databases(adminUrl, hasStatStatements), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
