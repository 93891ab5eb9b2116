// What the console's overview shows: backlog and oldest lag per kind (view backlog, paused marked
// from kind_controls), leader and epoch (coordinator_lease), live workers, failed counts,
// throughput and lateness per minute over the last hour, and open circuit breakers when the
// circuit_breakers table exists (issue 9; absent on older schemas: none shown).
import { layoutOf } from '../db/citus-layout.js';
import type { Queryable } from '../flow/kind-controls.js';

/** Workers heartbeat every 5 s; one not seen for three beats is not live (status, console). */
export const LIVE_WINDOW_S = 15;

export interface KindBacklog {
  kind: string;
  paused: boolean;
  pendingDue: number;
  inFlight: number;
  oldestDueAt: Date | null;
  oldestLagSeconds: number | null;
  failed: number;
}

export interface LiveWorker {
  workerId: string;
  host: string;
  pid: number;
  kinds: string[];
  startedAt: Date;
  lastSeenAt: Date;
  seenSecondsAgo: number;
}

export interface Leader {
  holder: string | null;
  epoch: number;
  acquiredAt: Date | null;
}

export interface MinutePoint {
  /** Start of the minute. */
  minute: Date;
  /** Timeouts that reached a final state (done or failed) in the minute. */
  finished: number;
  /** 95th percentile of lateness at commit in the minute (the shard's finished_at - due_at), seconds. */
  latenessP95: number | null;
  latenessMax: number | null;
}

export interface OpenBreaker {
  kind: string;
  target: string;
  worker: string;
  state: string;
  changedAt: Date;
  /** Seconds in this state. */
  forSeconds: number;
  lastError: string | null;
}

export async function kindBacklog(db: Queryable): Promise<KindBacklog[]> {
  if ((await layoutOf(db)).name === 'citus') {
    // On Citus (docs/scale.md "Citus: what runs") a subquery on timeouts correlated on kinds, a
    // table on the coordinator, is refused: the failed counts come from one grouped multi-shard read.
    const { rows } = await db.query<KindBacklog>(`
      SELECT k.kind, k.paused,
             coalesce(b.pending_due, 0)::int8 AS "pendingDue", coalesce(b.in_flight, 0)::int8 AS "inFlight",
             b.oldest_due_at AS "oldestDueAt", extract(epoch FROM b.oldest_lag)::float8 AS "oldestLagSeconds",
             coalesce(f.failed, 0)::int AS failed
        FROM timeout_center.kinds k
        LEFT JOIN timeout_center.backlog b ON b.kind = k.kind
        LEFT JOIN (SELECT t.kind::text AS kind, count(*) AS failed FROM timeout_center.timeouts t WHERE t.state = 'failed' GROUP BY t.kind) f
          ON f.kind = k.kind
       ORDER BY k.kind`);
    return rows;
  }
  const { rows } = await db.query<KindBacklog>(`
    SELECT k.kind, k.paused,
           coalesce(b.pending_due, 0)::int8 AS "pendingDue", coalesce(b.in_flight, 0)::int8 AS "inFlight",
           b.oldest_due_at AS "oldestDueAt", extract(epoch FROM b.oldest_lag)::float8 AS "oldestLagSeconds",
           (SELECT count(*) FROM timeout_center.timeouts t WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'failed')::int AS failed
      FROM timeout_center.kinds k
      LEFT JOIN timeout_center.backlog b ON b.kind = k.kind
     ORDER BY k.kind`);
  return rows;
}

export async function leader(db: Queryable): Promise<Leader | null> {
  const { rows } = await db.query<Leader>(`SELECT holder, epoch, acquired_at AS "acquiredAt" FROM timeout_center.coordinator_lease WHERE id = 1 AND epoch > 0`);
  return rows[0] ?? null;
}

export async function liveWorkers(db: Queryable): Promise<LiveWorker[]> {
  const { rows } = await db.query<LiveWorker>(
    `SELECT worker_id AS "workerId", host, pid, kinds, started_at AS "startedAt", last_seen_at AS "lastSeenAt",
            extract(epoch FROM now() - last_seen_at)::float8 AS "seenSecondsAgo"
       FROM timeout_center.workers
      WHERE stopped_at IS NULL AND last_seen_at > now() - make_interval(secs => $1)
      ORDER BY worker_id`,
    [LIVE_WINDOW_S],
  );
  return rows;
}

/** One point per minute of the last hour (minutes with nothing finished are 0), by when each
 *  timeout's shard committed: the shard's finished_at, stamped by the last statement before its
 *  COMMIT (a row's own finished_at is written earlier in that transaction, as the claim statement
 *  moves it: seconds earlier for a big shard or a slow handler). Done timeouts come from
 *  done_timeouts through its BRIN index on finished_at (read from ten minutes further back, for
 *  shards that committed in the hour but moved their rows before it), failed ones from timeouts. */
export async function lastHour(db: Queryable): Promise<MinutePoint[]> {
  const { rows } = await db.query<MinutePoint>(`
    WITH minutes AS (
      SELECT generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()), interval '1 minute') AS minute),
    closed AS (
      SELECT t.due_at, greatest(t.finished_at, s.finished_at) AS at
        FROM timeout_center.all_timeouts t LEFT JOIN timeout_center.shards s ON s.id = t.shard_id
       WHERE t.finished_at >= date_trunc('minute', now()) - interval '69 minutes' AND t.state IN ('done', 'failed')),
    finished AS (
      SELECT date_trunc('minute', at) AS minute, count(*) AS n,
             percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM at - due_at)) AS p95,
             max(extract(epoch FROM at - due_at))::float8 AS mx
        FROM closed
       WHERE at >= date_trunc('minute', now()) - interval '59 minutes'
       GROUP BY 1)
    SELECT m.minute, coalesce(f.n, 0)::int8 AS finished, f.p95 AS "latenessP95", f.mx AS "latenessMax"
      FROM minutes m LEFT JOIN finished f USING (minute)
     ORDER BY m.minute`);
  return rows;
}

/** Circuit breakers of the external path that are not closed (open or half-open), as the live
 *  workers last saw them: a stopped worker's breakers say nothing about the target now. */
export async function openBreakers(db: Queryable): Promise<OpenBreaker[]> {
  const { rows } = await db.query<OpenBreaker>(
    `SELECT b.kind, b.target, b.worker, b.state, b.changed_at AS "changedAt",
            extract(epoch FROM now() - b.changed_at)::float8 AS "forSeconds", b.last_error AS "lastError"
       FROM timeout_center.circuit_breakers b
       JOIN timeout_center.workers w ON w.worker_id = b.worker AND w.stopped_at IS NULL
        AND w.last_seen_at > now() - make_interval(secs => $1)
      WHERE b.state <> 'closed'
      ORDER BY b.kind, b.target, b.worker`,
    [LIVE_WINDOW_S],
  );
  return rows;
}
