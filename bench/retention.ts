// npm run bench:retention [-- options]: what retention of done_timeouts costs, with and without a
// snapshot that holds the vacuum horizon (docs/vacuum-horizon.md "Retention under a held snapshot").
//
// Each scenario is a fresh database on the bench's own PostgreSQL (bench/lib/server.ts: durable
// commits, track_commit_timestamp on, autovacuum as shipped), migrated with our migrations. It
// loads --rows history rows into timeout_center.done_timeouts, spread evenly over --days days up to
// now, in finish order (as workers write them), VACUUM ANALYZEs and checkpoints, then:
//   1. starts a steady hot path: every 100 ms, --rate/10 timeouts due 500 ms later are inserted
//      into timeout_center.timeouts, and a claim-shaped statement (claim.sql's batch form without a
//      handler: due pending rows FOR UPDATE SKIP LOCKED, deleted from timeouts, inserted into
//      done_timeouts) moves what is due, one statement per 100 ms;
//   2. after --baseline-s seconds of that alone, runs the purge the way the retention service
//      runs it (src/retention/retention.ts purge(): purge_done_timeouts.sql, batch after batch of
//      retention.batchSize), deleting every row older than --keep-days days;
//   3. measures the purge's time, rows, batches (each batch's time, to see whether it grows), WAL
//      bytes (pg_current_wal_lsn before and after, the hot path's share subtracted at its
//      baseline rate), and the hot path's lateness at commit
//      (pg_xact_commit_timestamp(xmin) - due_at of the rows it moved) in the baseline window and
//      in the purge window.
// Scenarios (--scenarios, interleaved per round):
//   free    nothing holds the horizon
//   held    another connection holds a REPEATABLE READ snapshot from before the baseline to the
//           end of the purge (a report, a pg_dump)
//   reuse   steady state: after a first purge and a VACUUM, one more day of rows is written (into
//           the space the first purge freed, as a running center does), and the next day is purged
//   reuse-held  the same with a held snapshot during the second purge
//   minutes        the service's steady cadence on a table as loaded (each range of the BRIN index
//                  holds rows of one time): --minute-runs purges in a row, each deleting the next
//                  minute of the oldest rows (what a run every retention.intervalMs finds)
//   minutes-reuse  the same after the reuse setup (ranges whose space was freed and refilled hold
//                  old and new times, so the BRIN index selects them for every cutoff)
//   minutes-reuse-held  the same with a held snapshot
//   (these load the history right after migrate: into the table from before the partitioning of
//   sql/0051, which retention deletes by batch as before; they measure deleting)
// Partitioned by day (sql/0050, 0051: what retention does once the days have their partitions):
// the empty table from before the partitioning is dropped, a partition is made for each of the
// --days full UTC days before today and the days ahead, and --rows/--days rows loaded into each:
//   days           one run keeping --keep-days full days: the older days' partitions dropped
//   days-held      the same with a held snapshot that has not read the history
//   days-held-reader  the same with a held snapshot that has read it (a pg_dump, a report on
//                  the history): its ACCESS SHARE lock stands in the way of the DETACH, which
//                  waits the retention's lock_timeout and is left to the next run
//   days-minutes   --minute-runs runs at the service's cadence with no day to drop yet (what
//                  1,439 of the day's 1,440 runs cost)
//
//   --rows <n>           history rows (default 3,000,000)
//   --days <n>           days they span (default 3)
//   --keep-days <n>      the purge deletes rows older than this (default 2: one day of rows)
//   --rate <n>           hot path timeouts per second (default 1000)
//   --baseline-s <n>     hot path alone before the purge (default 15)
//   --max-purge-s <n>    stop the purge after this long (default 600)
//   --batch <n>          retention.batchSize (default 5000, the config's default)
//   --scenarios <list>   comma separated (default free,held,reuse)
//   --minute-runs <n>    purges of one minute each in the minutes scenarios (default 10)
//   --rounds <n>         (default 1)
//   --out <file>         raw results as JSON
//   --help               this text
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
// dist/: npm run bench:retention builds first.
import { migrate } from '../dist/db/migrate.js';
import { purge } from '../dist/retention/retention.js';
import { startBenchServer } from './lib/server.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string' },
    days: { type: 'string' },
    'keep-days': { type: 'string' },
    rate: { type: 'string' },
    'baseline-s': { type: 'string' },
    'max-purge-s': { type: 'string' },
    batch: { type: 'string' },
    scenarios: { type: 'string', default: 'free,held,reuse' },
    rounds: { type: 'string' },
    'minute-runs': { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const TOOL = 'bench:retention';
const o = positiveCounts(TOOL, args, {
  rows: 3_000_000,
  days: 3,
  'keep-days': 2,
  rate: 1000,
  'baseline-s': 15,
  'max-purge-s': 600,
  batch: 5000,
  rounds: 1,
  'minute-runs': 10,
});
const SCENARIOS = [
  'free',
  'held',
  'reuse',
  'reuse-held',
  'minutes',
  'minutes-reuse',
  'minutes-reuse-held',
  'days',
  'days-held',
  'days-held-reader',
  'days-minutes',
] as const;
type Scenario = (typeof SCENARIOS)[number];
const scenarios = args.scenarios.split(',').map((s) => s.trim()) as Scenario[];
for (const s of scenarios) if (!SCENARIOS.includes(s)) failUsage(TOOL, `unknown scenario ${s}; known: ${SCENARIOS.join(', ')}`);
if (o['keep-days'] >= o.days) failUsage(TOOL, '--keep-days must be less than --days (or nothing is purged)');

const KIND = 'order.unpaid';
const DAY_MS = 86_400_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (m: string) => console.error(`[${new Date().toISOString().slice(11, 19)}] ${m}`);

/** Rows from-to (1-based ids) finished evenly over [startMs ago .. endMs ago] relative to now. */
async function loadHistory(pool: pg.Pool, fromId: number, toId: number, startAgoMs: number, endAgoMs: number): Promise<void> {
  const chunk = 500_000;
  const n = toId - fromId + 1;
  for (let a = fromId; a <= toId; a += chunk) {
    const b = Math.min(toId, a + chunk - 1);
    await pool.query(
      `INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
       SELECT g, $1, g::text, f - interval '1 second', NULL, 1, g / 1000, 'applied', NULL, f - interval '15 minutes', f
         FROM generate_series($2::int8, $3::int8) g
        CROSS JOIN LATERAL (SELECT now() - make_interval(secs => ($4::float8 - ($4::float8 - $5::float8) * (g - $7::int8) / $6::float8) / 1000) AS f) t`,
      [KIND, a, b, startAgoMs, endAgoMs, n, fromId],
    );
  }
}

interface HotPath {
  stop(): Promise<void>;
  errors: string[];
}

/** The steady stream: inserts and a claim-shaped move, every 100 ms each. */
function hotPath(url: string, rate: number): HotPath {
  const ins = new pg.Pool({ connectionString: url, max: 1 });
  const mov = new pg.Pool({ connectionString: url, max: 1 });
  let running = true;
  const errors: string[] = [];
  const perTick = Math.max(1, Math.round(rate / 10));
  let seq = 0;
  const loop = async (fn: () => Promise<unknown>) => {
    let next = Date.now();
    while (running) {
      try {
        await fn();
      } catch (err) {
        errors.push((err as Error).message);
      }
      next += 100;
      const wait = next - Date.now();
      if (wait > 0) await sleep(wait);
      else next = Date.now();
    }
  };
  const inserting = loop(async () => {
    const first = seq;
    seq += perTick;
    await ins.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT $1, 'hot-' || g, now() + interval '500 milliseconds' FROM generate_series($2::int8, $3::int8) g`,
      [KIND, first, first + perTick - 1],
    );
  });
  const moving = loop(() =>
    mov.query(
      `WITH fresh AS MATERIALIZED (
         SELECT d.id FROM timeout_center.timeouts d
          WHERE d.kind = $1 AND d.state = 'pending' AND d.available_at <= statement_timestamp()
          ORDER BY d.available_at LIMIT 5000 FOR UPDATE SKIP LOCKED
       ), taken AS (
         DELETE FROM timeout_center.timeouts t WHERE t.id = ANY (ARRAY(SELECT id FROM fresh))
         RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at
       )
       INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
       SELECT id + 1000000000000, kind, biz_id, due_at, payload, attempts + 1, NULL, 'applied', last_error, created_at, clock_timestamp() FROM taken`,
      [KIND],
    ),
  );
  return {
    errors,
    async stop() {
      running = false;
      await Promise.all([inserting, moving]);
      await ins.end();
      await mov.end();
    },
  };
}

interface Lateness {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

async function latenessBetween(pool: pg.Pool, from: Date, to: Date): Promise<Lateness> {
  const { rows } = await pool.query<Lateness>(
    `SELECT count(*)::int AS n,
            (percentile_cont(0.5) WITHIN GROUP (ORDER BY l) * 1000)::float8 AS p50,
            (percentile_cont(0.99) WITHIN GROUP (ORDER BY l) * 1000)::float8 AS p99,
            (max(l) * 1000)::float8 AS max
       FROM (SELECT extract(epoch FROM c - d.due_at) AS l
               FROM timeout_center.done_timeouts d CROSS JOIN LATERAL (SELECT pg_xact_commit_timestamp(d.xmin) AS c) x
              WHERE d.id > 1000000000000 AND d.due_at >= $1 AND d.due_at < $2) y`,
    [from, to],
  );
  const r = rows[0]!;
  const round = (v: number | null) => (v === null ? null : Math.round(v));
  return { n: r.n, p50: round(r.p50), p99: round(r.p99), max: round(r.max) };
}

const lsn = async (pool: pg.Pool) => (await pool.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]!.l;
const walSince = async (pool: pg.Pool, from: string) =>
  Number((await pool.query<{ b: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::int8 AS b', [from])).rows[0]!.b);
const dbNow = async (pool: pg.Pool) => (await pool.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t;

/** The history's figures, summed over its partitions when it has them. */
async function tableFigures(pool: pg.Pool) {
  const { rows } = await pool.query(
    `WITH t AS (SELECT relid FROM pg_partition_tree('timeout_center.done_timeouts') WHERE isleaf
                UNION ALL SELECT 'timeout_center.done_timeouts'::regclass WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree('timeout_center.done_timeouts'))),
          i AS (SELECT relid FROM pg_partition_tree('timeout_center.done_timeouts_finished') WHERE isleaf
                UNION ALL SELECT 'timeout_center.done_timeouts_finished'::regclass WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree('timeout_center.done_timeouts_finished')))
     SELECT (SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM t)::int8 AS heap_bytes,
            (SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM i)::int8 AS brin_bytes,
            coalesce(sum(s.n_live_tup), 0)::int8 AS live, coalesce(sum(s.n_dead_tup), 0)::int8 AS dead,
            coalesce(sum(s.autovacuum_count), 0)::int AS autovacuums, (SELECT count(*) FROM t)::int AS partitions
       FROM t JOIN pg_stat_user_tables s ON s.relid = t.relid`,
  );
  const r = rows[0] as Record<string, string | number>;
  return Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Number(v)]));
}

async function runScenario(server: Awaited<ReturnType<typeof startBenchServer>>, scenario: Scenario, round: number) {
  const db = await server.createDatabase(`ret_${scenario}`);
  const pool = new pg.Pool({ connectionString: db.url, max: 3 });
  const holder = new pg.Client({ connectionString: db.url, application_name: 'bench held snapshot' });
  try {
    await migrate(pool, pino({ level: 'silent' }));
    await pool.query(`INSERT INTO timeout_center.kinds (kind) VALUES ($1) ON CONFLICT DO NOTHING`, [KIND]);
    const loadStarted = performance.now();
    const days = scenario.startsWith('days');
    let keepMs = o['keep-days'] * DAY_MS;
    if (days) {
      // Days after the partitioning: the old table (empty here) aged out and dropped, each full
      // day before today in its own partition, --rows spread evenly over them.
      const old = (
        await pool.query<{ n: string }>(`SELECT c.relname AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                                                      WHERE i.inhparent = 'timeout_center.done_timeouts'::regclass AND c.relname LIKE 'done\\_timeouts\\_before\\_%'`)
      ).rows[0]!.n;
      await pool.query(`ALTER TABLE timeout_center.done_timeouts DETACH PARTITION timeout_center.${old}`);
      await pool.query(`DROP TABLE timeout_center.${old}`);
      await pool.query(`SELECT timeout_center.add_history_partition((now() AT TIME ZONE 'UTC')::date + d) FROM generate_series(-$1::int, 3) d`, [o.days]);
      const today = (
        await pool.query<{ ms: number }>(
          `SELECT (extract(epoch FROM now() - date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') * 1000)::float8 AS ms`,
        )
      ).rows[0]!.ms;
      await loadHistory(pool, 1, o.rows, today + o.days * DAY_MS, today + 1000);
      // Keep --keep-days full days before today: the cutoff a second past that day boundary (in
      // the minutes runs, minutes before it: no day to drop yet).
      keepMs = today + o['keep-days'] * DAY_MS + (scenario === 'days-minutes' ? (o['minute-runs'] + 1) * 60_000 : -1000);
    } else await loadHistory(pool, 1, o.rows, o.days * DAY_MS, 0);
    const reuse = scenario.includes('reuse');
    const minutes = scenario.startsWith('minutes') || scenario === 'days-minutes';
    if (reuse) {
      // The first purge, then the space it freed made reusable, then the next day written.
      await pool.query('VACUUM ANALYZE timeout_center.done_timeouts');
      const first = await purge(pool, { doneAfterMs: keepMs, scansAfterMs: 7 * DAY_MS, batchSize: o.batch, scanBatchSize: 100 });
      log(`${scenario}: first purge ${first.timeouts} rows in ${first.ms} ms`);
      await pool.query('VACUUM ANALYZE timeout_center.done_timeouts');
      const perDay = Math.round(o.rows / o.days);
      // One more day "after now": finished_at in (now, now + 1 day]; the next purge, keeping one
      // day less, then deletes the next day of the original rows.
      await loadHistory(pool, o.rows + 1, o.rows + perDay, 0, -DAY_MS);
      keepMs -= DAY_MS;
    }
    await pool.query('VACUUM ANALYZE timeout_center.done_timeouts');
    await pool.query('CHECKPOINT');
    const loadMs = Math.round(performance.now() - loadStarted);
    const before = await tableFigures(pool);
    log(`${scenario} round ${round}: loaded (${loadMs} ms), ${JSON.stringify(before)}`);

    const held = scenario.endsWith('held') || scenario === 'days-held-reader';
    if (held) {
      await holder.connect();
      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await holder.query('SELECT count(*) FROM timeout_center.kinds');
      if (scenario === 'days-held-reader')
        await holder.query("SELECT count(*) FROM timeout_center.done_timeouts WHERE finished_at > now() - interval '1 minute'");
    }
    const hot = hotPath(db.url, o.rate);
    const baseFrom = await dbNow(pool);
    const baseLsn = await lsn(pool);
    await sleep(o['baseline-s'] * 1000);
    const baseWal = await walSince(pool, baseLsn);
    const purgeFrom = await dbNow(pool);
    const purgeLsn = await lsn(pool);
    const batches: { ms: number; rows: number }[] = [];
    let last = performance.now();
    const deadline = performance.now() + o['max-purge-s'] * 1000;
    const runs: { ms: number; rows: number }[] = [];
    const partitions = { dropped: 0, droppedRows: 0, skipped: 0, skippedDetail: [] as string[] };
    const purgeOnce = (doneAfterMs: number) =>
      purge(
        pool,
        { doneAfterMs, scansAfterMs: 7 * DAY_MS, batchSize: o.batch, scanBatchSize: 100 },
        {
          shouldStop: () => performance.now() > deadline,
          onBatch: (table, n) => {
            if (table !== 'timeouts') return;
            const now = performance.now();
            batches.push({ ms: Math.round(now - last), rows: n });
            last = now;
          },
          onPartition: (action, _name, rows, detail) => {
            if (action === 'dropped') {
              partitions.dropped += 1;
              partitions.droppedRows += rows;
            } else if (action === 'skipped') {
              partitions.skipped += 1;
              if (detail) partitions.skippedDetail.push(detail);
            }
          },
        },
      );
    let result = { timeouts: 0, ms: 0 };
    if (minutes) {
      // The oldest rows left are keepMs + 1 day old (reuse: the first purge took the first day).
      const oldest = days ? keepMs : reuse ? keepMs + DAY_MS : o.days * DAY_MS;
      for (let i = 1; i <= o['minute-runs']; i += 1) {
        last = performance.now();
        const r = await purgeOnce(oldest - i * 60_000);
        runs.push({ ms: r.ms, rows: r.timeouts });
        result = { timeouts: result.timeouts + r.timeouts, ms: result.ms + r.ms };
      }
    } else result = await purgeOnce(keepMs);
    const purgeTo = await dbNow(pool);
    const purgeWal = await walSince(pool, purgeLsn);
    await sleep(2000);
    await hot.stop();
    if (held) await holder.query('ROLLBACK');
    const purgeS = (purgeTo.getTime() - purgeFrom.getTime()) / 1000;
    const hotWalPerS = baseWal / o['baseline-s'];
    const baseline = await latenessBetween(pool, baseFrom, purgeFrom);
    const during = await latenessBetween(pool, purgeFrom, purgeTo);
    const after = await tableFigures(pool);
    const tenth = Math.max(1, Math.floor(batches.length / 10));
    const avg = (xs: { ms: number }[]) => (xs.length ? Math.round(xs.reduce((a, b) => a + b.ms, 0) / xs.length) : null);
    const out = {
      scenario,
      round,
      rows: o.rows,
      loadMs,
      purge: {
        rows: result.timeouts,
        batches: batches.length,
        ms: result.ms,
        rowsPerSecond: Math.round(result.timeouts / (result.ms / 1000)),
        stoppedAtLimit: performance.now() > deadline,
        firstTenthBatchMs: avg(batches.slice(0, tenth)),
        lastTenthBatchMs: avg(batches.slice(-tenth)),
        batchMs: batches.map((b) => b.ms),
        ...(minutes ? { runs } : {}),
        ...(days ? { partitions } : {}),
        walBytes: purgeWal,
        walBytesNetOfHotPath: Math.round(purgeWal - hotWalPerS * purgeS),
        walBytesPerRow: result.timeouts ? Math.round((purgeWal - hotWalPerS * purgeS) / result.timeouts) : null,
      },
      hotPath: { baselineMs: baseline, duringPurgeMs: during, errors: hot.errors.slice(0, 5), errorCount: hot.errors.length },
      table: { before, after },
      load1: loadavg()[0],
    };
    if (minutes) log(`${scenario}: runs (ms/rows) ${runs.map((r) => `${r.ms}/${r.rows}`).join(' ')}`);
    if (days) log(`${scenario}: partitions ${JSON.stringify(partitions)}`);
    log(
      `${scenario}: purged ${result.timeouts} in ${result.ms} ms (${batches.length} batches, first tenth ${out.purge.firstTenthBatchMs} ms, last tenth ${out.purge.lastTenthBatchMs} ms), WAL ${(purgeWal / 1048576).toFixed(0)} MB; hot p50/p99 ${baseline.p50}/${baseline.p99} -> ${during.p50}/${during.p99} ms`,
    );
    return out;
  } finally {
    await holder.end().catch(() => {});
    await pool.end();
    await db.drop();
  }
}

// The WAL warm-up (bench/lib/server.ts) for a full run; a small one (the smoke test) skips it.
const server = await startBenchServer({ walWarmupBytes: o.rows >= 1_000_000 ? 1024 ** 3 : 0 });
const results: unknown[] = [];
try {
  log(`settings ${JSON.stringify(server.settings)}`);
  for (let round = 1; round <= o.rounds; round += 1) {
    for (const s of scenarios) {
      results.push(await runScenario(server, s, round));
      if (args.out) writeFileSync(args.out, JSON.stringify({ options: o, scenarios, settings: server.settings, results }, null, 2) + '\n');
    }
  }
} finally {
  await server.stop();
}
console.log(
  JSON.stringify(
    results.map((r) => ({ ...(r as Record<string, unknown>), purge: { ...(r as { purge: object }).purge, batchMs: undefined } })),
    null,
    2,
  ),
);
