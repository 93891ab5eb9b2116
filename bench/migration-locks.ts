// npm run bench:migration-locks [-- options]: what each migration 0002-0023 locks, for how long,
// and whether an INSERT into timeouts waits meanwhile (docs/upgrading.md, "What each migration
// locks").
//
// One database on the bench's own PostgreSQL (bench/lib/server.ts; or BENCH_DATABASE_URL) goes
// through the migrations in order, as an upgrade from an old release does. Each file is applied the
// way src/db/migrate.ts applies it (BEGIN, the file, the migrations row, COMMIT). Tables that grow
// with traffic are loaded before the first migration that touches them:
//   after 0001   --rows pending timeouts over three kinds, due over the next 6 hours (the README's
//                INSERT, one statement over generate_series, triggers on); --rows shards (done,
//                over --rows/100 reduced scans)
//   after 0005   a routing rule for one kind of three (order.unshipped, hash over three databases):
//                0020 stamps the target of that kind's rows
//   before 0010  --rows done timeouts in timeouts (where they lived until 0010 moved them)
// Before each measured migration: VACUUM ANALYZE of the loaded tables and a CHECKPOINT (what a
// live server with autovacuum looks like, and no checkpoint of the load inside the measure).
// While the migration runs, one connection inserts a timeout per statement in a loop (autocommit,
// the README's INSERT) and another samples pg_locks every --sample-ms for both backends: which
// relation locks the migration holds (mode, first seen), and whether the insert waits (not
// granted) and on whom (pg_blocking_pids). Printed: a Markdown table; written: the raw results.
//
//   --rows <n>          rows loaded per table (default 1,000,000)
//   --through <NNNN>    last migration measured (default 23: the migrations of the code before 1.0.0)
//   --sample-ms <ms>    pg_locks sampling period (default 10)
//   --rounds <r>        whole upgrades, each on a fresh database (default 1)
//   --out <file>        raw results (default docs/bench/migration-locks.json)
//   --summarize <file>  print the median table of earlier raw results, run nothing
//   --compare <file>    with --summarize: a column with the times of a run at another --rows
//   --help              this text
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
// dist/: npm run bench:migration-locks builds first.
import { listMigrations, type Migration } from '../dist/db/migrate.js';
import { startBenchServer } from './lib/server.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string' },
    through: { type: 'string' },
    'sample-ms': { type: 'string' },
    rounds: { type: 'string' },
    summarize: { type: 'string' },
    compare: { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
if (args.summarize) {
  type Raw = { rows: number; rounds: MigrationResult[][] };
  const raw = JSON.parse(readFileSync(args.summarize, 'utf8')) as Raw;
  const compare = args.compare ? (JSON.parse(readFileSync(args.compare, 'utf8')) as Raw) : undefined;
  console.log(medianTable(raw.rounds, raw.rows, compare));
  process.exit(0);
}
const counts = positiveCounts(
  'bench:migration-locks',
  { rows: args.rows, through: args.through, sampleMs: args['sample-ms'], rounds: args.rounds },
  {
    rows: 1_000_000,
    through: 23,
    sampleMs: 10,
    rounds: 1,
  },
);
const ROWS = counts.rows;
const OUT = args.out ?? 'docs/bench/migration-locks.json';
const KINDS = ['order.unpaid', 'order.unshipped', 'order.unconfirmed'];
/** The tables that grow with traffic (loaded, counted, VACUUMed). */
const GROWING = ['timeouts', 'done_timeouts', 'shards', 'scans'];

const migrations = listMigrations().filter((m: Migration) => m.version <= counts.through);
if (migrations.length === 0) failUsage('bench:migration-locks', `no migration numbered up to ${counts.through}`);

/** PostgreSQL's table lock modes, weakest first. */
const MODES = [
  'AccessShareLock',
  'RowShareLock',
  'RowExclusiveLock',
  'ShareUpdateExclusiveLock',
  'ShareLock',
  'ShareRowExclusiveLock',
  'ExclusiveLock',
  'AccessExclusiveLock',
];

interface LockSeen {
  relation: string;
  mode: string;
  /** ms after the migration's BEGIN when the sampler first saw it (granted or waiting) */
  firstMs: number;
  lastMs: number;
  granted: boolean;
}

interface InsertWait {
  /** ms after BEGIN */
  firstMs: number;
  lastMs: number;
  relation: string;
  mode: string;
  blockedByMigration: boolean;
}

interface MigrationResult {
  name: string;
  version: number;
  rowsBefore: Record<string, number>;
  durationMs: number;
  /** Relation locks of the migration's backend on relations that existed before it (held until COMMIT). */
  locks: LockSeen[];
  /** The strongest lock per existing table, how long it was held (first seen to COMMIT). */
  strongest: { relation: string; mode: string; heldMs: number }[];
  /** Per existing table (not index or view): how long its writers (a lock of SHARE or stronger:
   *  conflicts with an INSERT's ROW EXCLUSIVE) and its readers (ACCESS EXCLUSIVE) were shut out. */
  blocked: { table: string; writesMs: number; readsMs: number }[];
  inserts: {
    /** median latency of the inserts that ran entirely outside the migration */
    baselineMs: number;
    /** inserts that overlapped the migration */
    during: number;
    /** the longest of those, end to end */
    maxMs: number;
    /** the insert backend seen waiting on a lock, with what it waited for */
    waits: InsertWait[];
    errors: string[];
  };
}

const server = await startBenchServer({ walWarmupBytes: 0 });
// One database and three sessions per round (set by runRound).
let migrator: pg.Client;
let sampler: pg.Client;
let inserter: pg.Client;
const startedAt = new Date().toISOString();
const loadBefore = loadavg();

function log(message: string): void {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${message}`);
}

async function timed<T>(what: string, fn: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  const r = await fn();
  log(`${what}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return r;
}

async function existingTables(): Promise<Set<string>> {
  const { rows } = await migrator.query<{ t: string }>(
    `SELECT c.relname AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'timeout_center' AND c.relkind IN ('r', 'p')`,
  );
  return new Set(rows.map((r) => r.t));
}

async function rowCounts(): Promise<Record<string, number>> {
  const tables = await existingTables();
  const out: Record<string, number> = {};
  for (const t of GROWING) {
    if (!tables.has(t)) continue;
    const { rows } = await migrator.query<{ n: string }>(`SELECT count(*) AS n FROM timeout_center.${t}`);
    out[t] = Number(rows[0]!.n);
  }
  return out;
}

// The loads -----------------------------------------------------------------------------------

async function loadAfterInit(): Promise<void> {
  await migrator.query(`INSERT INTO timeout_center.kinds (kind) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, [KINDS]);
  await timed(`load ${ROWS} pending timeouts`, () =>
    migrator.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, payload)
       SELECT ($2::text[])[1 + g % 3], (1000000000 + g)::text, now() + ((g::bigint * 7919) % 21600) * interval '1 second',
              jsonb_build_object('channel', 'app')
         FROM generate_series(1, $1::int) g`,
      [ROWS, KINDS],
    ),
  );
  const scans = Math.max(1, Math.floor(ROWS / 100));
  await timed(`load ${scans} scans and ${ROWS} shards`, async () => {
    await migrator.query(
      `INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, claimed, shard_count, done, skipped, failed, retried,
                                         started_at, mapped_at, reduced_at)
       SELECT 1, 'bench', now() - g * interval '1 second', 'reduced', 50000, 100, 50000, 0, 0, 0,
              now() - g * interval '1 second', now() - g * interval '1 second', now() - g * interval '1 second'
         FROM generate_series(1, $1::int) g`,
      [scans],
    );
    await migrator.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, state, attempts, owner, lease_token, published_at, publish_count,
                                          done_count, skipped_count, failed_count, retried_count, created_at, started_at, finished_at)
       SELECT s.id, ($3::text[])[1 + g % 3], g / $2::int, 500, 'done', 1, 'worker-' || (g % 16), gen_random_uuid(), s.started_at, 1,
              490, 10, 0, 0, s.started_at, s.started_at, s.started_at + interval '200 milliseconds'
         FROM generate_series(0, $1::int - 1) g
         JOIN timeout_center.scans s ON s.id = 1 + g % $2::int`,
      [ROWS, scans, KINDS],
    );
  });
}

async function loadRoute(): Promise<void> {
  await migrator.query(
    `INSERT INTO timeout_center.kind_routes (kind, route_by, databases) VALUES ('order.unshipped', 'hash', ARRAY['orders_a', 'orders_b', 'orders_c'])`,
  );
}

async function loadDoneInTimeouts(): Promise<void> {
  // Rows reach done through a shard's UPDATE; inserting them as done is what the insert trigger
  // refuses, so the load skips triggers (replica role) and writes available_at itself.
  await timed(`load ${ROWS} done timeouts into timeouts`, async () => {
    await migrator.query(`SET session_replication_role = replica`);
    try {
      await migrator.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, available_at, payload, state, attempts, shard_id, result,
                                              created_at, finished_at)
         SELECT ($2::text[])[1 + g % 3], (2000000000 + g)::text, t.due, t.due, jsonb_build_object('channel', 'app'), 'done', 1,
                1 + g % $1::int, CASE WHEN g % 10 = 0 THEN 'skipped' ELSE 'applied' END, t.due - interval '15 minutes',
                t.due + interval '300 milliseconds'
           FROM generate_series(1, $1::int) g
          CROSS JOIN LATERAL (SELECT now() - interval '7 days' + g * (interval '7 days' / $1::int) AS due) t`,
        [ROWS, KINDS],
      );
    } finally {
      await migrator.query(`SET session_replication_role = DEFAULT`);
    }
  });
}

// One measured migration ---------------------------------------------------------------------

interface InsertSample {
  startMs: number;
  endMs: number;
  error?: string;
}

async function measure(m: Migration): Promise<MigrationResult> {
  const tables = await existingTables();
  for (const t of GROWING) if (tables.has(t)) await migrator.query(`VACUUM ANALYZE timeout_center.${t}`);
  await migrator.query('CHECKPOINT');
  const rowsBefore = await rowCounts();
  const existing = new Set(
    (
      await migrator.query<{ oid: number }>(
        `SELECT c.oid::int AS oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'timeout_center'`,
      )
    ).rows.map((r) => r.oid),
  );
  const tableNames = new Set(
    (
      await migrator.query<{ rel: string }>(
        `SELECT n.nspname || '.' || c.relname AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'timeout_center' AND c.relkind IN ('r', 'p')`,
      )
    ).rows.map((r) => r.rel),
  );
  const migrationPid = (await migrator.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const insertPid = (await inserter.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;

  // Absolute times while running; made relative to the migration's BEGIN at the end.
  const now = () => performance.now();
  let running = true;
  const inserts: InsertSample[] = [];
  let seq = 0;
  const insertLoop = (async () => {
    while (running) {
      seq += 1;
      const s: InsertSample = { startMs: now(), endMs: 0 };
      try {
        await inserter.query(
          `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, payload) VALUES ('order.unpaid', $1, now() + interval '1 hour', '{"channel": "app"}')`,
          [`live-${m.version}-${seq}`],
        );
      } catch (err) {
        s.error = (err as Error).message;
      }
      s.endMs = now();
      inserts.push(s);
    }
  })();

  const locks = new Map<string, LockSeen>();
  const waits = new Map<string, InsertWait>();
  const sampling = (async () => {
    while (running) {
      const at = now();
      const { rows } = await sampler.query<{ pid: number; oid: number; rel: string | null; mode: string; granted: boolean; blockers: number[] }>(
        `SELECT l.pid, l.relation::int AS oid, CASE WHEN c.oid IS NULL THEN NULL ELSE n.nspname || '.' || c.relname END AS rel, l.mode, l.granted,
                CASE WHEN l.granted THEN '{}'::int[] ELSE pg_blocking_pids(l.pid) END AS blockers
           FROM pg_locks l
           LEFT JOIN pg_class c ON c.oid = l.relation
           LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE l.pid = ANY ($1::int[]) AND l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        [[migrationPid, insertPid]],
      );
      for (const r of rows) {
        const rel = r.rel ?? `(relation ${r.oid}, not committed yet)`;
        if (r.pid === migrationPid) {
          if (!existing.has(r.oid)) continue; // what the migration itself creates is nobody else's
          const key = `${rel} ${r.mode}`;
          const seen = locks.get(key);
          if (seen) {
            seen.lastMs = at;
            seen.granted = seen.granted || r.granted;
          } else locks.set(key, { relation: rel, mode: r.mode, firstMs: at, lastMs: at, granted: r.granted });
        } else if (!r.granted) {
          const key = `${rel} ${r.mode}`;
          const seen = waits.get(key);
          if (seen) seen.lastMs = at;
          else waits.set(key, { relation: rel, mode: r.mode, firstMs: at, lastMs: at, blockedByMigration: r.blockers.includes(migrationPid) });
        }
      }
      await new Promise((r) => setTimeout(r, counts.sampleMs));
    }
  })();

  // A baseline of inserts before the migration starts.
  await new Promise((r) => setTimeout(r, 500));
  const begin = now();
  await migrator.query('BEGIN');
  await migrator.query(m.sql);
  await migrator.query('INSERT INTO timeout_center.migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
  // Every relation lock the transaction took is held until COMMIT: read them from inside it, so
  // that one held for less than a sampling period is listed too.
  const atCommit = await migrator.query<{ oid: number; rel: string; mode: string }>(
    `SELECT l.relation::int AS oid, n.nspname || '.' || c.relname AS rel, l.mode
       FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND n.nspname = 'timeout_center'`,
  );
  await migrator.query('COMMIT');
  const durationMs = now() - begin;
  await new Promise((r) => setTimeout(r, 500));
  running = false;
  await Promise.all([insertLoop, sampling]);
  for (const s of inserts) {
    s.startMs -= begin;
    s.endMs -= begin;
  }
  for (const l of [...locks.values(), ...waits.values()]) {
    l.firstMs -= begin;
    l.lastMs -= begin;
  }

  const outside = inserts.filter((s) => !s.error && (s.endMs < 0 || s.startMs > durationMs)).map((s) => s.endMs - s.startMs);
  outside.sort((a, b) => a - b);
  const during = inserts.filter((s) => s.startMs <= durationMs && s.endMs >= 0);
  for (const r of atCommit.rows) {
    if (!existing.has(r.oid) || locks.has(`${r.rel} ${r.mode}`)) continue;
    // Taken and held for less than a sampling period: first seen at COMMIT.
    locks.set(`${r.rel} ${r.mode}`, { relation: r.rel, mode: r.mode, firstMs: durationMs, lastMs: durationMs, granted: true });
  }
  const lockList = [...locks.values()].sort((a, b) => a.firstMs - b.firstMs);
  const strongest = new Map<string, LockSeen>();
  for (const l of lockList) {
    const cur = strongest.get(l.relation);
    if (!cur || MODES.indexOf(l.mode) > MODES.indexOf(cur.mode)) strongest.set(l.relation, l);
  }
  return {
    name: m.name,
    version: m.version,
    rowsBefore,
    durationMs: round(durationMs),
    locks: lockList.map((l) => ({ ...l, firstMs: round(l.firstMs), lastMs: round(l.lastMs) })),
    blocked: blockedTables(lockList, durationMs, tableNames),
    strongest: [...strongest.values()]
      .filter((l) => !l.relation.startsWith('('))
      .map((l) => ({ relation: l.relation, mode: l.mode, heldMs: round(durationMs - l.firstMs) })),
    inserts: {
      baselineMs: round(outside[Math.floor(outside.length / 2)] ?? 0),
      during: during.length,
      maxMs: round(Math.max(0, ...during.map((s) => s.endMs - s.startMs))),
      waits: [...waits.values()].map((w) => ({ ...w, firstMs: round(w.firstMs), lastMs: round(w.lastMs) })),
      errors: [...new Set(inserts.filter((s) => s.error).map((s) => s.error!))],
    },
  };
}

/** Modes that conflict with ROW EXCLUSIVE (an INSERT, UPDATE or DELETE). */
const BLOCKS_WRITES = new Set(['ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock']);

function blockedTables(locks: LockSeen[], durationMs: number, tables: Set<string>): MigrationResult['blocked'] {
  const out: MigrationResult['blocked'] = [];
  for (const table of new Set(locks.map((l) => l.relation))) {
    if (!tables.has(table)) continue;
    const mine = locks.filter((l) => l.relation === table);
    // A sample taken just before BEGIN may report a lock taken just after: clamp to BEGIN.
    const writes = mine.filter((l) => BLOCKS_WRITES.has(l.mode)).map((l) => Math.max(0, l.firstMs));
    const reads = mine.filter((l) => l.mode === 'AccessExclusiveLock').map((l) => Math.max(0, l.firstMs));
    if (writes.length === 0) continue;
    out.push({
      table,
      writesMs: round(durationMs - Math.min(...writes)),
      readsMs: reads.length ? round(durationMs - Math.min(...reads)) : 0,
    });
  }
  return out;
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

// The run ------------------------------------------------------------------------------------

/** One upgrade from an empty database through --through, on a database of its own. */
async function runRound(n: number): Promise<MigrationResult[]> {
  const results: MigrationResult[] = [];
  const db = await server.createDatabase(`migration_locks_${n}`);
  migrator = new pg.Client({ connectionString: db.url, application_name: 'migration' });
  sampler = new pg.Client({ connectionString: db.url, application_name: 'lock-sampler' });
  inserter = new pg.Client({ connectionString: db.url, application_name: 'insert-loop' });
  try {
    await Promise.all([migrator.connect(), sampler.connect(), inserter.connect()]);
    // What src/db/migrate.ts creates before the first migration.
    await migrator.query(`CREATE SCHEMA IF NOT EXISTS timeout_center;
      CREATE TABLE IF NOT EXISTS timeout_center.migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    for (const m of migrations) {
      if (m.version === 1) {
        await timed(m.name, async () => {
          await migrator.query('BEGIN');
          await migrator.query(m.sql);
          await migrator.query('INSERT INTO timeout_center.migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
          await migrator.query('COMMIT');
        });
        await loadAfterInit();
        continue;
      }
      if (m.version === 10) await loadDoneInTimeouts();
      const r = await measure(m);
      results.push(r);
      const locked = r.strongest.map((l) => `${l.relation.replace('timeout_center.', '')} ${l.mode}`).join(', ');
      log(
        `round ${n} ${m.name}: ${r.durationMs} ms; ${locked || 'no lock on an existing relation'}; inserts: ${r.inserts.during} during, longest ${r.inserts.maxMs} ms (baseline ${r.inserts.baselineMs} ms)${r.inserts.errors.length ? `, errors: ${r.inserts.errors.join('; ')}` : ''}`,
      );
      if (m.version === 5) await loadRoute();
    }
    return results;
  } finally {
    await Promise.allSettled([migrator.end(), sampler.end(), inserter.end()]);
    await db.drop().catch(() => {});
  }
}

try {
  const rounds: MigrationResult[][] = [];
  for (let n = 1; n <= counts.rounds; n += 1) rounds.push(await runRound(n));
  const report = {
    generatedAt: startedAt,
    command: `npm run bench:migration-locks -- --rows ${ROWS} --rounds ${counts.rounds}`,
    rows: ROWS,
    machine: { cpus: cpus().length, loadavgBefore: loadBefore, loadavgAfter: loadavg(), node: process.version },
    postgres: server.settings,
    rounds,
  };
  writeFileSync(OUT, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`\nraw results: ${OUT}\n`);
  for (const [i, r] of rounds.entries()) console.log(`round ${i + 1}\n${markdown(r)}\n`);
  console.log(`median of ${rounds.length} round(s)\n${medianTable(rounds, ROWS)}`);
} finally {
  await server.stop();
}

function markdown(rs: MigrationResult[]): string {
  const lines = ['| migration | time | tables whose writes waited (and reads) | longest INSERT into timeouts meanwhile |', '|---|---:|---|---:|'];
  for (const r of rs) {
    const blocked = r.blocked
      .map((b) => `${b.table.replace('timeout_center.', '')} ${Math.round(b.writesMs)} ms${b.readsMs ? ` (reads ${Math.round(b.readsMs)} ms)` : ''}`)
      .join(', ');
    lines.push(`| ${r.name} | ${Math.round(r.durationMs)} ms | ${blocked || 'none'} | ${Math.round(r.inserts.maxMs)} ms |`);
  }
  return lines.join('\n');
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function duration(ms: number): string {
  if (ms >= 10_000) return `${Math.round(ms / 1000)} s`;
  if (ms >= 1000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms)} ms`;
}

/** The write-blocking modes a migration took on a table, in the order it took them, up to ACCESS
 *  EXCLUSIVE (anything after it changes nothing for others). */
function modeSequence(r: MigrationResult, table: string): string {
  // (here, not at the top level: --summarize runs before the module's constants are set)
  const MODE_NAMES: Record<string, string> = {
    ShareLock: 'SHARE',
    ShareRowExclusiveLock: 'SHARE ROW EXCLUSIVE',
    ExclusiveLock: 'EXCLUSIVE',
    AccessExclusiveLock: 'ACCESS EXCLUSIVE',
  };
  const seen = r.locks
    .filter((l) => l.relation === table && MODE_NAMES[l.mode])
    .map((l) => ({ at: Math.max(0, l.firstMs), rank: Object.keys(MODE_NAMES).indexOf(l.mode), mode: l.mode }))
    .sort((a, b) => a.at - b.at || a.rank - b.rank);
  const ae = seen.find((l) => l.mode === 'AccessExclusiveLock');
  const kept = ae ? [...seen.filter((l) => l.at < ae.at), ae] : seen;
  return [...new Set(kept.map((l) => MODE_NAMES[l.mode]!))].join(' then ');
}

/**
 * One row per migration: the locks that stopped others (the median over rounds of how long, per
 * table), its time (median, and the range over rounds), its time in a second run at another size
 * (`compare`, to tell what grows with the rows), and what a concurrent INSERT into timeouts did.
 */
function medianTable(rounds: MigrationResult[][], rows: number, compare?: { rows: number; rounds: MigrationResult[][] }): string {
  const range = (xs: number[]) => (xs.length > 1 ? `${duration(median(xs))} (${duration(Math.min(...xs))}-${duration(Math.max(...xs))})` : duration(xs[0]!));
  const lines = [
    `| migration | lock and table: how long others wait | time at ${rows.toLocaleString('en')} rows |${compare ? ` at ${compare.rows.toLocaleString('en')} |` : ''} an INSERT into timeouts meanwhile |`,
    `|---|---|---:|${compare ? '---:|' : ''}---|`,
  ];
  for (const first of rounds[0] ?? []) {
    const runs = rounds.map((r) => r.find((m) => m.name === first.name)).filter((m): m is MigrationResult => m !== undefined);
    const tables = [...new Set(runs.flatMap((r) => r.blocked.map((b) => b.table)))].sort();
    const locks = tables
      .map((t) => {
        const w = median(runs.map((r) => r.blocked.find((b) => b.table === t)?.writesMs ?? 0));
        const rd = median(runs.map((r) => r.blocked.find((b) => b.table === t)?.readsMs ?? 0));
        const who =
          rd === 0
            ? `writes wait ${duration(w)}`
            : Math.abs(rd - w) > Math.max(5, 0.1 * w)
              ? `writes wait ${duration(w)}, reads ${duration(rd)}`
              : `reads and writes wait ${duration(w)}`;
        return `${t.replace('timeout_center.', '')} ${modeSequence(runs[0]!, t)}: ${who}`;
      })
      .join('; ');
    const waited = runs.filter((r) => r.inserts.waits.some((w) => w.blockedByMigration)).length;
    const longest = duration(median(runs.map((r) => r.inserts.maxMs)));
    const insert = waited > 0 ? `waits, up to ${longest} (${waited}/${runs.length} rounds)` : `no wait (longest ${longest})`;
    const other = compare?.rounds.map((r) => r.find((m) => m.name === first.name)?.durationMs).filter((d): d is number => d !== undefined) ?? [];
    lines.push(
      `| ${first.name} | ${locks || 'nothing that stops writes'} | ${range(runs.map((r) => r.durationMs))} |${compare ? ` ${other.length ? duration(median(other)) : '-'} |` : ''} ${insert} |`,
    );
  }
  return lines.join('\n');
}
