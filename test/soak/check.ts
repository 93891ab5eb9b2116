// The soak's end: the invariants in every database that holds timeouts or orders, history =
// business truth per order, lateness outside the fault windows, and the gap in closes after each
// fault (docs/reliability.md, "Soak").
import type pg from 'pg';
import { LEASE_MS, type Db, type Fault } from './common.ts';
import type { OrdersDb } from './topology.ts';

export type Violations = Record<string, { count: number; sample: string[]; detail?: unknown[] }>;

/** After a fault, the gaps in closes are looked at until this long after the nemesis was done with it. */
const GAP_HORIZON_MS = 5000;

export async function check(dbs: { timeoutsDbs: Db[]; ordersDbs: OrdersDb[] }, faults: Fault[], paidIds: Set<number>, arrivalsStoppedMs: number) {
  const violations: Violations = {};
  const add = (name: string, ids: string[]) => (violations[name] = { count: ids.length, sample: ids.slice(0, 10) });
  const ids = async (pool: pg.Pool, sql: string, params: unknown[] = []) => (await pool.query<{ id: string }>(sql, params)).rows.map((r) => String(r.id));
  const paid = [...paidIds];

  for (const { name, pool } of dbs.timeoutsDbs) {
    add(
      `I1 ${name}: lost (due, not final)`,
      await ids(pool, `SELECT id FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed')`),
    );
    add(
      `I4 ${name}: reduce totals != failed rows`,
      await ids(
        pool,
        `SELECT 'failed' AS id WHERE (SELECT coalesce(sum(failed), 0) FROM timeout_center.scans WHERE state = 'reduced') <> (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed')`,
      ),
    );
  }
  let closed = 0;
  const closedBy: Record<string, number> = {};
  for (const { name, pool, kind, timeouts } of dbs.ordersDbs) {
    add(
      `I2 ${name}: closed more than once`,
      await ids(pool, `SELECT id FROM orders WHERE closes > 1 UNION SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1`),
    );
    add(`I3 ${name}: paid order closed`, await ids(pool, `SELECT order_id AS id FROM order_transitions WHERE from_status = 'paid'`));
    add(`I3 ${name}: payer told paid, order not paid`, await ids(pool, `SELECT id FROM orders WHERE id = ANY($1::bigint[]) AND status <> 'paid'`, [paid]));
    // History = business truth, per order: closed by us <=> its timeout done/applied; a cancelled
    // timeout's order not closed by us.
    const history = new Map<string, string>();
    for (const r of (
      await timeouts.pool.query<{ biz_id: string; state: string; result: string | null }>(
        `SELECT DISTINCT ON (biz_id) biz_id, state, result FROM timeout_center.all_timeouts WHERE kind = $1 ORDER BY biz_id, id DESC`,
        [kind],
      )
    ).rows)
      history.set(r.biz_id, r.state === 'done' ? `done/${r.result}` : r.state);
    const mismatch: string[] = [];
    const cancelledClosed: string[] = [];
    let here = 0;
    for (const o of (await pool.query<{ id: string; status: string }>(`SELECT id::text, status FROM orders`)).rows) {
      const h = history.get(o.id) ?? 'none';
      if (o.status === 'closed') here += 1;
      if ((o.status === 'closed') !== (h === 'done/applied')) mismatch.push(`${kind}/${o.id}: order ${o.status}, timeout ${h}`);
      if (h === 'cancelled' && o.status === 'closed') cancelledClosed.push(`${kind}/${o.id}`);
    }
    add(`history ${name}: closed <=> applied`, mismatch);
    if (mismatch.length > 0) violations[`history ${name}: closed <=> applied`]!.detail = await historyDetail(timeouts.pool, pool, kind, mismatch.slice(0, 5));
    add(`history ${name}: cancelled timeout, order closed`, cancelledClosed);
    closedBy[name] = here;
    closed += here;
  }

  // Lateness at commit of timeouts not due near a fault: their shard's finished_at (stamped by the
  // last statement before its COMMIT; a row's own finished_at is written earlier in the shard's
  // transaction) - due_at.
  const windows = faults.map((f) => [f.startMs - 1000, f.endMs + LEASE_MS] as const);
  const late: number[] = [];
  const latest: { db: string; kind: string; bizId: string; dueAt: string; lateMs: number }[] = [];
  let failed = 0;
  let timeouts = 0;
  for (const { name, pool } of dbs.timeoutsDbs) {
    const { rows } = await pool.query<{ due_ms: string; late_ms: number; kind: string; biz_id: string }>(
      `SELECT d.kind, d.biz_id, (extract(epoch FROM d.due_at) * 1000)::int8::text AS due_ms,
              extract(epoch FROM greatest(d.finished_at, s.finished_at) - d.due_at)::float8 * 1000 AS late_ms
         FROM timeout_center.done_timeouts d LEFT JOIN timeout_center.shards s ON s.id = d.shard_id`,
    );
    for (const r of rows) {
      if (windows.some(([a, b]) => Number(r.due_ms) >= a && Number(r.due_ms) <= b)) continue;
      late.push(r.late_ms);
      latest.push({ db: name, kind: r.kind, bizId: r.biz_id, dueAt: new Date(Number(r.due_ms)).toISOString(), lateMs: Math.round(r.late_ms) });
      // Keep the five latest: where the worst figure comes from.
      if (latest.length > 20) latest.sort((x, y) => y.lateMs - x.lateMs).splice(5);
    }
    const counts = await pool.query<{ failed: number; all: number }>(
      `SELECT count(*) FILTER (WHERE state = 'failed')::int AS failed, count(*)::int AS all FROM timeout_center.all_timeouts`,
    );
    failed += counts.rows[0]!.failed;
    timeouts += counts.rows[0]!.all;
  }
  late.sort((a, b) => a - b);
  const q = (p: number) => (late.length ? Math.round(late[Math.min(late.length - 1, Math.floor(p * late.length))]!) : null);

  return {
    timeouts,
    closed,
    closedBy,
    failed,
    lateness: {
      outsideFaults: late.length,
      p50Ms: q(0.5),
      p99Ms: q(0.99),
      maxMs: late.length ? Math.round(late.at(-1)!) : null,
      latest: latest.sort((x, y) => y.lateMs - x.lateMs).slice(0, 5),
    },
    closeGaps: await closeGaps(dbs.ordersDbs, faults, arrivalsStoppedMs),
    violations,
  };
}

/** Close instants (ms, ascending) of one orders database, on its own clock (order_transitions.at is
 *  clock_timestamp() at the close; every server of the soak runs on this machine). */
async function closeTimes(pool: pg.Pool): Promise<Float64Array> {
  const { rows } = await pool.query<{ t: number }>(
    `SELECT (extract(epoch FROM at) * 1000)::float8 AS t FROM order_transitions WHERE to_status = 'closed' ORDER BY at`,
  );
  return Float64Array.from(rows, (r) => r.t);
}

/** The first index whose value is >= x. */
function lowerBound(xs: Float64Array, x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The longest wait for a close that began in [from, until]: from `from` to the first close after
 *  it, or between two closes the first of which falls inside. A wait during which the next fault
 *  began (at `next`) is that fault's. Closes stop for good after the arrivals stop, so `until`
 *  never passes that. */
export function longestGap(times: Float64Array, from: number, until: number, next = Infinity): { gapMs: number; fromMs: number } {
  let i = lowerBound(times, from);
  if (i >= times.length) return { gapMs: Math.max(0, Math.min(until, next) - from), fromMs: from };
  const longest = { gapMs: Math.min(times[i]!, next) - from, fromMs: from };
  for (i += 1; i < times.length && times[i - 1]! <= until; i += 1) {
    if (times[i - 1]! <= next && times[i]! > next) continue;
    if (times[i]! - times[i - 1]! > longest.gapMs) Object.assign(longest, { gapMs: times[i]! - times[i - 1]!, fromMs: times[i - 1]! });
  }
  return longest;
}

/** Per fault, the longest gap in closes of a database it can stop (its scope: one database, or
 *  all): measured in each database on its own, so that one database's stall does not hide behind
 *  another's closes. */
async function closeGaps(ordersDbs: OrdersDb[], faults: Fault[], arrivalsStoppedMs: number) {
  const byDbTimes = new Map<string, Float64Array>();
  for (const { name, pool } of ordersDbs) byDbTimes.set(name, await closeTimes(pool));
  const dbs = [...byDbTimes.keys()];
  const touches = (f: Fault, db: string) => !f.scope || f.scope.includes(db);
  const perFault = faults
    .filter((f) => f.startMs < arrivalsStoppedMs)
    .map((f, i, fs) => {
      const byDb = dbs.map((db) => {
        const times = byDbTimes.get(db)!;
        // A gap that begins, or goes on, once the next fault touching this database has begun is that fault's.
        const next = fs.slice(i + 1).find((g) => touches(g, db))?.startMs ?? Infinity;
        const gap = longestGap(times, f.startMs, Math.min(f.doneMs + GAP_HORIZON_MS, next, arrivalsStoppedMs), next);
        // The first close after the server answered again, if one came before the next fault.
        const firstAfterBack = f.backMs === undefined ? undefined : times[lowerBound(times, f.backMs)];
        const resumedMs = firstAfterBack !== undefined && firstAfterBack < next ? firstAfterBack - f.backMs! : undefined;
        return { db, ...gap, resumedMs };
      });
      const inScope = byDb.filter((g) => touches(f, g.db));
      const worst = inScope.reduce((w, g) => (g.gapMs > w.gapMs ? g : w));
      const resumed = inScope.map((g) => g.resumedMs).filter((r): r is number => r !== undefined);
      return {
        type: f.type,
        ...(f.target ? { target: f.target } : {}),
        at: new Date(f.startMs).toISOString(),
        doneAt: new Date(f.doneMs).toISOString(),
        gapMs: Math.round(worst.gapMs),
        gapDb: worst.db,
        gapFrom: new Date(worst.fromMs).toISOString(),
        // Closes resumed in the databases it stopped: the last of them to resume.
        ...(resumed.length === inScope.length ? { closesResumedMs: Math.round(Math.max(...resumed)) } : {}),
        // Every database, also those outside its scope: whether a fault of one server (a store, a
        // Redis master) stops closes that do not depend on it.
        gapByDb: Object.fromEntries(byDb.map((g) => [g.db, Math.round(g.gapMs)])),
        ...(f.detail ?? {}),
      };
    });
  const byType: Record<string, { count: number; p50Ms: number; maxMs: number; closesResumedMaxMs?: number }> = {};
  // A process fault is told apart by the role of its victim (a leader's death stops every close
  // until the lock expires; a worker's, only its own shards).
  const group = (g: (typeof perFault)[number]) => {
    const role = /^(coordinator|worker)-\d+$/.exec(g.target ?? '')?.[1];
    return role ? `${g.type}, ${role}` : g.type;
  };
  for (const type of new Set(perFault.map(group))) {
    const gaps = perFault
      .filter((g) => group(g) === type)
      .map((g) => g.gapMs)
      .sort((a, b) => a - b);
    const resumed = perFault.filter((g) => group(g) === type && g.closesResumedMs !== undefined).map((g) => g.closesResumedMs!);
    byType[type] = {
      count: gaps.length,
      p50Ms: gaps[Math.floor(gaps.length / 2)]!,
      maxMs: gaps.at(-1)!,
      ...(resumed.length ? { closesResumedMaxMs: Math.max(...resumed) } : {}),
    };
  }
  // For comparison: the longest gap between two closes of a database away from every fault's
  // window (arrivals are steady, so this is what the load alone gives on this machine).
  let quietMaxMs = 0;
  for (const [db, times] of byDbTimes) {
    const meetsFault = (a: number, b: number) => faults.some((f) => touches(f, db) && a <= f.doneMs + GAP_HORIZON_MS && b >= f.startMs);
    for (let i = 1; i < times.length && times[i]! <= arrivalsStoppedMs; i += 1) {
      if (times[i]! - times[i - 1]! > quietMaxMs && !meetsFault(times[i - 1]!, times[i]!)) quietMaxMs = times[i]! - times[i - 1]!;
    }
  }
  const worst = perFault.reduce<(typeof perFault)[number] | undefined>((w, g) => (!w || g.gapMs > w.gapMs ? g : w), undefined);
  return { byType, worst, quietMaxMs: Math.round(quietMaxMs), perFault };
}

/** What the center and the orders' database say about a few orders whose history and truth differ:
 *  each timeout row of the order, the shards that ran it (attempts, counts, times), and the order's
 *  transitions, for the report. */
async function historyDetail(center: pg.Pool, orders: pg.Pool, kind: string, sample: string[]): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const entry of sample) {
    const bizId = entry.slice(kind.length + 1).split(':')[0]!;
    const timeouts = (
      await center.query(
        `SELECT id, state, result, attempts, shard_id, due_at, finished_at, last_error FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id = $2 ORDER BY id`,
        [kind, bizId],
      )
    ).rows;
    const shardIds = timeouts.map((t: { shard_id: string | null }) => t.shard_id).filter((x): x is string => x !== null);
    const shards = (
      await center.query(
        `SELECT id, scan_id, state, attempts, owner, target, size, done_count, skipped_count, failed_count, retried_count, claimed_at, started_at, finished_at, error_sample
           FROM timeout_center.shards WHERE id = ANY ($1::bigint[])`,
        [shardIds],
      )
    ).rows;
    const transitions = (await orders.query(`SELECT * FROM order_transitions WHERE order_id = $1::bigint ORDER BY at`, [bizId])).rows;
    out.push({ order: entry, timeouts, shards, transitions });
  }
  return out;
}
