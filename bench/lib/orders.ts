// The business side every system works on: an orders table, the close statement, and the
// measurements taken from it. Every system closes orders with the same conditional UPDATE. An
// order is closed for its customer when the close's commit is visible, so every system's lateness
// and end time are read at commit: pg_xact_commit_timestamp(xmin) of each closed order (the bench's
// server runs with track_commit_timestamp = on), on PostgreSQL's clock, the same way for all.
// closed_at = clock_timestamp() is still stamped by the close itself, only to show how far before
// its commit a statement-time stamp stops the clock (the measurement error of the old figures).
import pg from 'pg';

// bigint counts and ids as numbers (they stay far below 2^53).
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

/** The one kind every timeout-center system in the bench schedules. */
export const KIND = 'order.unpaid';

export const ORDERS_DDL = `
  CREATE TABLE orders (
    id        bigint PRIMARY KEY,
    status    text NOT NULL,
    due_at    timestamptz NOT NULL,
    closed_at timestamptz,
    closes    integer NOT NULL DEFAULT 0
  )`;

/** The close, as one set-based statement ($1: order ids). Conditional: a paid order is skipped. */
export const CLOSE_MANY_SQL =
  "UPDATE orders SET status = 'closed', closed_at = clock_timestamp(), closes = closes + 1 WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";
/** The same close for one order (per-job systems). */
export const CLOSE_ONE_SQL = "UPDATE orders SET status = 'closed', closed_at = clock_timestamp(), closes = closes + 1 WHERE id = $1 AND status = 'unpaid'";

/** Inserts orders [from, to]; every 10th is paid. */
export async function insertOrders(pool: pg.Pool, from: number, to: number, dueAt: Date): Promise<void> {
  await pool.query(
    `INSERT INTO orders (id, status, due_at)
     SELECT i, CASE WHEN i % 10 = 0 THEN 'paid' ELSE 'unpaid' END, $3 FROM generate_series($1::bigint, $2::bigint) i`,
    [from, to, dueAt],
  );
}

export interface Progress {
  closed: number;
  /** unpaid orders due by now and not closed */
  backlog: number;
}

export async function progress(pool: pg.Pool): Promise<Progress> {
  const { rows } = await pool.query<Progress>(
    `/* tc-bench */ SELECT count(*) FILTER (WHERE status = 'closed')::int AS closed,
            count(*) FILTER (WHERE status = 'unpaid' AND due_at <= now())::int AS backlog
       FROM orders`,
  );
  return rows[0]!;
}

export interface Lateness {
  count: number;
  p50: number;
  p99: number;
  max: number;
  /** the first close's lateness (s): from the due instant to the first commit */
  min: number;
  /** epoch s of the last close's commit */
  lastCloseEpoch: number | null;
  /** epoch s of the last closed_at stamp (the old, pre-commit clock), for the comparison */
  lastStampEpoch: number | null;
  /** largest commit - closed_at of an order (s): how long before its commit a stamp stops the clock */
  stampToCommitMax: number;
}

/** Lateness (s) of every closed order, at commit: pg_xact_commit_timestamp(xmin) - due_at. The
 *  close is the last write of an order row, so xmin is the closing transaction. */
export async function lateness(pool: pg.Pool): Promise<Lateness> {
  const { rows } = await pool.query<Lateness>(
    `SELECT count(*)::int AS count,
            coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY l), 0)::float8 AS p50,
            coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY l), 0)::float8 AS p99,
            coalesce(max(l), 0)::float8 AS max,
            coalesce(min(l), 0)::float8 AS min,
            extract(epoch FROM max(committed))::float8 AS "lastCloseEpoch",
            extract(epoch FROM max(closed_at))::float8 AS "lastStampEpoch",
            coalesce(extract(epoch FROM max(committed - closed_at)), 0)::float8 AS "stampToCommitMax"
       FROM (SELECT extract(epoch FROM c.committed - o.due_at) AS l, c.committed, o.closed_at
               FROM orders o CROSS JOIN LATERAL (SELECT pg_xact_commit_timestamp(o.xmin) AS committed) c
              WHERE o.status = 'closed') x`,
  );
  const r = rows[0]!;
  if (r.count > 0 && r.lastCloseEpoch === null) {
    throw new Error(
      'no commit timestamps on the closed orders: the server runs with track_commit_timestamp = off (the bench starts its own server with it on; see bench/lib/server.ts)',
    );
  }
  return r;
}

export interface Correctness {
  ok: boolean;
  unpaid: number;
  closedOnce: number;
  notClosed: number;
  closedTwice: number;
  paidTouched: number;
  /** systems with a timeouts table (timeout-center, the limits): due timeouts not final */
  timeoutsNotFinal?: number;
  problems: string[];
}

/** The due timeouts not final, in the table the system drains. */
export const UNFINISHED_SQL = {
  ours: "SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed')",
  minimal: "SELECT count(*)::int AS n FROM timeouts WHERE due_at <= now() AND state <> 'done'",
} as const;

/** Unpaid orders all closed exactly once; paid orders untouched; with a timeouts table, every due
 *  timeout final. */
export async function correctness(pool: pg.Pool, timeoutsTable: 'ours' | 'minimal' | undefined): Promise<Correctness> {
  const { rows } = await pool.query<Omit<Correctness, 'ok' | 'problems'>>(
    `SELECT count(*) FILTER (WHERE id % 10 <> 0)::int AS unpaid,
            count(*) FILTER (WHERE id % 10 <> 0 AND status = 'closed' AND closes = 1)::int AS "closedOnce",
            count(*) FILTER (WHERE id % 10 <> 0 AND status <> 'closed')::int AS "notClosed",
            count(*) FILTER (WHERE closes > 1)::int AS "closedTwice",
            count(*) FILTER (WHERE id % 10 = 0 AND (status <> 'paid' OR closes <> 0))::int AS "paidTouched"
       FROM orders`,
  );
  const c: Correctness = { ...rows[0]!, ok: true, problems: [] };
  if (timeoutsTable) {
    const r = await pool.query<{ n: number }>(UNFINISHED_SQL[timeoutsTable]);
    c.timeoutsNotFinal = r.rows[0]!.n;
    if (c.timeoutsNotFinal > 0) c.problems.push(`${c.timeoutsNotFinal} due timeouts not final`);
  }
  if (c.notClosed > 0) c.problems.push(`${c.notClosed} unpaid orders not closed`);
  if (c.closedTwice > 0) c.problems.push(`${c.closedTwice} orders closed more than once`);
  if (c.paidTouched > 0) c.problems.push(`${c.paidTouched} paid orders touched`);
  c.ok = c.problems.length === 0;
  return c;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export async function dbNow(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ t: number }>('SELECT extract(epoch FROM clock_timestamp())::float8 AS t');
  return rows[0]!.t * 1000;
}

export const BULL_QUEUE = 'close-order';

/** BullMQ connection options from a redis:// URL (blocking reads need maxRetriesPerRequest null). */
export function bullConnection(redisUrl: string) {
  const u = new URL(redisUrl);
  return { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0), maxRetriesPerRequest: null };
}
