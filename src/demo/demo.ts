// `timeout-center demo`: the whole pipeline in one process, in a minute, with only Node.
//
// Without DATABASE_URL it opens an embedded PostgreSQL (PGlite, data under --data-dir); without
// REDIS_URL it hands shards over an in-process channel and elects the coordinator with a local
// lock. With the URLs set it uses the real services (give it a database of its own: the demo's
// coordinator takes the database's coordinator lease). It migrates, creates demo_orders, seeds
// orders (most unpaid) with timeouts due over the next seconds, runs a coordinator and a worker,
// shows live progress and a summary, and exits 0 once every timeout of the run is final and no
// unpaid order is left.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { pino, type Logger } from 'pino';
import { parseConfig, type LoadedConfig } from '../config.js';
import { LocalLeaderLock } from '../coordinator/leader-lock.js';
import type { EmbeddedPostgres } from '../db/embedded.js';
import { syncKinds } from '../db/kinds.js';
import { migrate } from '../db/migrate.js';
import { createPool } from '../db/pool.js';
import { redactDbUrl, startRuntime, type Runtime } from '../runtime.js';
import { InProcessChannel } from '../transport/in-process.js';
import { redactUrl } from '../transport/redis-connection.js';

export const DEMO_KIND = 'demo.order.unpaid';
export const DEMO_CLOSE_SQL = "UPDATE demo_orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";

export interface DemoOptions {
  orders: number;
  /** Timeouts fall due evenly over this many seconds from now. */
  spreadSeconds: number;
  /** Percent of orders paid before their timeout (their close is skipped by the handler's guard). */
  paidPercent: number;
  shardSize: number;
  concurrency: number;
  dataDir: string;
  databaseUrl?: string | undefined;
  redisUrl?: string | undefined;
  /** Redis key prefix when redisUrl is set. */
  redisKeyPrefix: string;
  /** Give up (exit 1) when the run is not finished this long after its last timeout fell due. */
  graceSeconds: number;
  /** Where progress and the summary go. */
  out: NodeJS.WritableStream & { isTTY?: boolean };
  json: boolean;
  logLevel: pino.LevelWithSilent;
}

export interface Progress {
  total: number;
  due: number;
  closed: number;
  skipped: number;
  failed: number;
  cancelled: number;
  waiting: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

export interface DemoSummary extends Progress {
  database: string;
  channel: string;
  unpaidLeft: number;
  paidOrders: number;
  scans: number;
  shards: number;
  elapsedSeconds: number;
  ok: boolean;
}

export class DemoError extends Error {
  override name = 'DemoError';
}

function demoConfig(databaseUrl: string, redisUrl: string | undefined, opts: DemoOptions): LoadedConfig {
  const config = parseConfig(
    {
      redisKeyPrefix: opts.redisKeyPrefix,
      kinds: {
        [DEMO_KIND]: {
          description: 'demo: close orders still unpaid at their deadline',
          shardSize: opts.shardSize,
          maxAttempts: 3,
          backoffMs: 200,
          handler: { type: 'sql', sql: DEMO_CLOSE_SQL },
        },
      },
      coordinator: { schedule: '* * * * * *', minTickIntervalMs: 50, lagCheckIntervalMs: 1000, republishAfterMs: 5000 },
      worker: { concurrency: opts.concurrency, blockMs: 200, leaseMs: 15_000, drainTimeoutMs: 5000, id: `demo-${process.pid}` },
      logLevel: opts.logLevel,
    },
    'demo',
  );
  return {
    ...config,
    databaseUrl,
    redisUrl: redisUrl ?? '',
    redisConnection: { mode: 'single', url: redisUrl ?? '' },
    baseDir: process.cwd(),
    source: 'demo',
    businessDatabaseUrls: {},
  };
}

/** The demo shop's table; it must exist before the worker starts (it checks its handler's SQL). */
async function createOrdersTable(pool: pg.Pool): Promise<void> {
  await pool.query(`CREATE TABLE IF NOT EXISTS demo_orders (
      id bigint PRIMARY KEY, status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), closed_at timestamptz)`);
}

/** Seeds this run's orders and their timeouts in one transaction, as a shop would; returns the
 *  id ranges. */
async function seed(pool: pg.Pool, opts: DemoOptions): Promise<{ firstOrder: number; firstTimeout: number; lastTimeout: number; paid: number }> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ first: number }>('SELECT coalesce(max(id), 0) + 1 AS first FROM demo_orders');
    const firstOrder = rows[0]!.first;
    await client.query(
      `INSERT INTO demo_orders (id, status)
       SELECT $1::bigint + g, CASE WHEN g % 100 < $3 THEN 'paid' ELSE 'unpaid' END FROM generate_series(0, $2::int - 1) g`,
      [firstOrder, opts.orders, opts.paidPercent],
    );
    // Due evenly over the spread, starting one second from now (the database's clock).
    const ids = await client.query<{ first: number; last: number }>(
      `WITH t AS (
         INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, payload)
         SELECT $1, o.id::text, now() + interval '1 second' + ((o.id - $2::bigint)::float8 / $3::int * $4::float8) * interval '1 second',
                jsonb_build_object('source', 'demo')
           FROM demo_orders o WHERE o.id >= $2::bigint ORDER BY o.id
         RETURNING id)
       SELECT min(id) AS first, max(id) AS last FROM t`,
      [DEMO_KIND, firstOrder, opts.orders, opts.spreadSeconds],
    );
    const paidCount = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM demo_orders WHERE id >= $1 AND status = 'paid'", [firstOrder]);
    await client.query('COMMIT');
    return { firstOrder, firstTimeout: ids.rows[0]!.first, lastTimeout: ids.rows[0]!.last, paid: paidCount.rows[0]!.n };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

async function readProgress(pool: pg.Pool, first: number, last: number): Promise<Progress> {
  const { rows } = await pool.query<Progress>(
    // Lateness at commit: the shard's finished_at (stamped by its last statement before COMMIT).
    `SELECT count(*)::int AS total,
            count(*) FILTER (WHERE t.due_at <= now())::int AS due,
            count(*) FILTER (WHERE t.state = 'done' AND t.result = 'applied')::int AS closed,
            count(*) FILTER (WHERE t.state = 'done' AND t.result = 'skipped')::int AS skipped,
            count(*) FILTER (WHERE t.state = 'failed')::int AS failed,
            count(*) FILTER (WHERE t.state = 'cancelled')::int AS cancelled,
            count(*) FILTER (WHERE t.state IN ('pending', 'dispatched') AND t.due_at <= now())::int AS waiting,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM greatest(t.finished_at, s.finished_at) - t.due_at))
              FILTER (WHERE t.state = 'done') AS p50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM greatest(t.finished_at, s.finished_at) - t.due_at))
              FILTER (WHERE t.state = 'done') AS p99,
            max(extract(epoch FROM greatest(t.finished_at, s.finished_at) - t.due_at)::float8) FILTER (WHERE t.state = 'done') AS max
       FROM timeout_center.all_timeouts t LEFT JOIN timeout_center.shards s ON s.id = t.shard_id AND t.state = 'done'
      WHERE t.id BETWEEN $1 AND $2 AND t.kind = $3`,
    [first, last, DEMO_KIND],
  );
  return rows[0]!;
}

const secs = (v: number | null) => (v === null ? '-' : v < 1 ? `${Math.round(v * 1000)} ms` : `${v.toFixed(2)} s`);

function progressLine(p: Progress, elapsed: number): string {
  const final = p.closed + p.skipped + p.failed + p.cancelled;
  const width = 24;
  const filled = p.total === 0 ? 0 : Math.round((final / p.total) * width);
  const bar = '#'.repeat(filled) + '.'.repeat(width - filled);
  return (
    `[${bar}] ${String(elapsed.toFixed(1)).padStart(5)} s  due ${p.due}/${p.total}  closed ${p.closed}  skipped ${p.skipped}  ` +
    `failed ${p.failed}  waiting ${p.waiting}  lateness p50 ${secs(p.p50)} p99 ${secs(p.p99)}`
  );
}

function demoLogger(level: pino.LevelWithSilent): Logger {
  // Logs go to stderr so the progress display on stdout stays readable.
  return pino(
    { level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime, serializers: { err: pino.stdSerializers.err } },
    pino.destination(2),
  );
}

/** Runs the demo; resolves with the summary (ok false when unpaid orders were left open). */
export async function runDemo(opts: DemoOptions, signal?: AbortSignal): Promise<DemoSummary> {
  const out = opts.out;
  const say = (line: string) => out.write(`${line}\n`);
  const logger = demoLogger(opts.logLevel);
  const started = Date.now();
  const cleanups: (() => Promise<unknown>)[] = [];
  let runtime: Runtime | undefined;
  try {
    let databaseUrl = opts.databaseUrl;
    let database: string;
    if (databaseUrl) {
      database = `PostgreSQL at ${redactDbUrl(databaseUrl)}`;
    } else {
      const fresh = !existsSync(join(opts.dataDir, 'PG_VERSION'));
      say(`${fresh ? 'creating' : 'opening'} the embedded PostgreSQL (PGlite) in ${opts.dataDir}${fresh ? ' (first run: a few seconds)' : ''}`);
      // Loaded on demand: PGlite is large, and no other verb needs it.
      const { startEmbeddedPostgres } = await import('../db/embedded.js');
      const embedded: EmbeddedPostgres = await startEmbeddedPostgres({ dataDir: opts.dataDir, logger });
      cleanups.push(() => embedded.close());
      databaseUrl = embedded.url;
      database = `embedded PostgreSQL (PGlite) in ${embedded.dataDir}`;
    }
    const channelName = opts.redisUrl ? `Redis Streams at ${redactUrl(opts.redisUrl)}` : 'in-process channel, local leader lock';
    say(`database: ${database}`);
    say(`shards:   ${channelName}`);

    const config = demoConfig(databaseUrl, opts.redisUrl, opts);
    const pool = createPool({ connectionString: databaseUrl, max: 2, applicationName: 'timeout-center demo', logger });
    cleanups.push(() => pool.end());
    await migrate(pool, logger);
    await syncKinds(pool, config.kinds);
    await createOrdersTable(pool);

    // The processes run before anything is due, as in production: lateness is then honest.
    runtime = await startRuntime({
      config,
      logger,
      coordinator: true,
      worker: true,
      ...(opts.redisUrl ? {} : { embedded: { channel: new InProcessChannel(), leaderLock: new LocalLeaderLock() } }),
    });
    say(`coordinator and worker (${opts.concurrency} shards at a time) started; the close runs as one UPDATE per shard of ${opts.shardSize}`);
    const run = await seed(pool, opts);
    say(
      `seeded ${opts.orders} orders (${opts.orders - run.paid} unpaid, ${run.paid} paid) with timeouts due over the next ${opts.spreadSeconds} s` +
        ` (kind ${DEMO_KIND}, orders ${run.firstOrder}..${run.firstOrder + opts.orders - 1})`,
    );

    const deadline = Date.now() + (opts.spreadSeconds + 1 + opts.graceSeconds) * 1000;
    const tty = Boolean(out.isTTY);
    let lastPrinted = 0;
    let progress = await readProgress(pool, run.firstTimeout, run.lastTimeout);
    for (;;) {
      const final = progress.closed + progress.skipped + progress.failed + progress.cancelled;
      const elapsed = (Date.now() - started) / 1000;
      if (tty) out.write(`\r\x1b[2K${progressLine(progress, elapsed)}`);
      else if (Date.now() - lastPrinted >= 1000 || final === progress.total) {
        say(progressLine(progress, elapsed));
        lastPrinted = Date.now();
      }
      if (final === progress.total) break;
      if (signal?.aborted) throw new DemoError('interrupted');
      if (Date.now() > deadline) {
        if (tty) out.write('\n');
        throw new DemoError(
          `the run did not finish within ${opts.graceSeconds} s after its last timeout fell due: ${progress.total - final} timeouts not final (see the log on stderr; LOG_LEVEL=info shows more)`,
        );
      }
      await new Promise((r) => setTimeout(r, tty ? 200 : 250));
      progress = await readProgress(pool, run.firstTimeout, run.lastTimeout);
    }
    if (tty) out.write('\n');

    // Let reduce close the run's scans before reading the totals.
    const reduceDeadline = Date.now() + 5000;
    let scans: { scans: number; shards: number; open: number } = { scans: 0, shards: 0, open: 0 };
    do {
      const { rows } = await pool.query<{ scans: number; shards: number; open: number }>(
        `SELECT count(DISTINCT sh.scan_id)::int AS scans, count(*)::int AS shards,
                count(DISTINCT sh.scan_id) FILTER (WHERE s.state <> 'reduced')::int AS open
           FROM timeout_center.shards sh JOIN timeout_center.scans s ON s.id = sh.scan_id
          WHERE sh.kind = $1 AND EXISTS (SELECT 1 FROM timeout_center.all_timeouts t WHERE t.shard_id = sh.id AND t.id BETWEEN $2 AND $3)`,
        [DEMO_KIND, run.firstTimeout, run.lastTimeout],
      );
      scans = rows[0]!;
      if (scans.open === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    } while (Date.now() < reduceDeadline);
    const { rows: left } = await pool.query<{ unpaid: number }>(
      "SELECT count(*)::int AS unpaid FROM demo_orders WHERE id BETWEEN $1 AND $2 AND status = 'unpaid'",
      [run.firstOrder, run.firstOrder + opts.orders - 1],
    );
    const unpaidLeft = left[0]!.unpaid;
    const summary: DemoSummary = {
      ...progress,
      database,
      channel: channelName,
      unpaidLeft,
      paidOrders: run.paid,
      scans: scans.scans,
      shards: scans.shards,
      elapsedSeconds: (Date.now() - started) / 1000,
      ok: unpaidLeft === 0 && progress.failed === 0,
    };
    say('');
    say('summary');
    say(`  orders          ${opts.orders} (${opts.orders - run.paid} unpaid, ${run.paid} paid before their deadline)`);
    say(`  closed          ${summary.closed} unpaid orders closed at their deadline`);
    say(`  skipped         ${summary.skipped} (already paid: the handler's "AND status = 'unpaid'" guard left them alone)`);
    say(`  failed          ${summary.failed}`);
    say(`  unpaid left     ${unpaidLeft}`);
    say(`  lateness        p50 ${secs(summary.p50)}, p99 ${secs(summary.p99)}, max ${secs(summary.max)} (applied time minus due time)`);
    say(`  work            ${summary.scans} scans, ${summary.shards} shards (one UPDATE each), ${summary.elapsedSeconds.toFixed(1)} s in all`);
    say(
      summary.ok
        ? `  result          OK: every unpaid order was closed, no paid order was touched`
        : `  result          NOT OK: ${unpaidLeft} unpaid orders left open, ${summary.failed} timeouts failed`,
    );
    if (!opts.databaseUrl) say(`  data            kept in ${opts.dataDir} (delete it to start over; inspect with timeout_center.scan_report)`);
    if (opts.json) say(JSON.stringify({ summary }));
    return summary;
  } finally {
    // Reverse order; every step runs even if one fails.
    const steps = [...(runtime ? [() => runtime!.stop({ drainTimeoutMs: 5000 })] : []), ...cleanups.reverse()];
    for (const step of steps) {
      try {
        await step();
      } catch (err) {
        logger.warn({ err }, 'demo cleanup step failed');
      }
    }
    logger.flush();
  }
}
