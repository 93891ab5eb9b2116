// Payments at the due instant, against a running fleet: every second order of N is paid within
// ±15 ms of its due time with a given payment text (the README's, or another for comparison), half
// the payments sent as one string and half statement by statement holding the transaction 5-35 ms
// before COMMIT. Returns what happened on both sides.
import pg from 'pg';
import type { CliProcess } from '../helpers/processes.js';
import { sleep, type Scenario } from '../faults/harness.js';
import { forOrder, statements } from './readme-blocks.js';
import { waitForDrain } from '../helpers/orders.js';

export interface RaceFigures {
  orders: number;
  payments: number;
  /** Payments whose guarded UPDATE changed the order (row count 1). */
  paid: number;
  refused: number;
  /** Payments that failed (deadlock victim, lock timeout ...), by SQLSTATE. */
  payerErrors: Record<string, number>;
  /** Worker log lines that mention a deadlock. */
  workerDeadlocks: number;
  /** Orders that went closed -> paid (a customer paying for a released order). */
  closedThenPaid: number;
  /** Orders that went paid -> closed. */
  paidThenClosed: number;
  /** Lateness of the applied closes (commit minus due), ms. */
  latenessP50Ms: number;
  latenessP99Ms: number;
  latenessMaxMs: number;
}

const JITTER_MS = 15;

export async function paymentRace(
  s: Scenario,
  workers: CliProcess[],
  payText: string,
  opts: {
    n: number;
    spreadMs: number;
    /** pay every payEvery-th order (default 2) */ payEvery?: number;
    /** the payers' connection (default the scenario's): e.g. a login holding the writer role only */ payerUrl?: string;
  },
): Promise<RaceFigures> {
  const payers = new pg.Pool({ connectionString: opts.payerUrl ?? s.databaseUrl, max: 16, application_name: 'payer' });
  payers.on('error', () => {});
  const steps = statements(payText);
  const payerErrors: Record<string, number> = {};
  let paid = 0;
  let refused = 0;
  let payments = 0;
  const pay = async (id: number, stepwise: boolean): Promise<void> => {
    payments += 1;
    const client = await payers.connect();
    try {
      let results: pg.QueryResult[];
      if (!stepwise) {
        // The block exactly as written, one simple-protocol string (BEGIN ... COMMIT inside).
        const r = (await client.query(forOrder(payText, id))) as unknown as pg.QueryResult | pg.QueryResult[];
        results = Array.isArray(r) ? r : [r];
      } else {
        results = [];
        for (const [i, statement] of steps.entries()) {
          if (i === steps.length - 1) await sleep(5 + Math.random() * 30); // hold before COMMIT
          results.push(await client.query(forOrder(statement, id)));
        }
      }
      // The row count of the payment (the UPDATE of orders) decides paid vs refused.
      const payment = results[steps.findIndex((st) => /^UPDATE orders\b/i.test(st))];
      if (payment?.rowCount === 1) paid += 1;
      else refused += 1;
    } catch (err) {
      const code = (err as { code?: string }).code ?? 'other';
      payerErrors[code] = (payerErrors[code] ?? 0) + 1;
      await client.query('ROLLBACK').catch(() => {});
    } finally {
      client.release();
    }
  };

  const { from, to } = await s.seed(opts.n, { dueInMs: 1000, spreadMs: opts.spreadMs });
  // Due instants on this machine's clock: PostgreSQL's due_at shifted by the clocks' offset.
  const { rows } = await s.pool.query<{ id: string; due_ms: number; now_ms: number }>(
    // DISTINCT ON: on Citus a multi-shard read of both tables is no one snapshot, so a row moving
    // from timeouts to done_timeouts meanwhile can show in both halves of all_timeouts.
    `SELECT DISTINCT ON (biz_id) biz_id AS id, extract(epoch FROM due_at) * 1000 AS due_ms, extract(epoch FROM clock_timestamp()) * 1000 AS now_ms
       FROM timeout_center.all_timeouts WHERE biz_id::bigint BETWEEN $1 AND $2 AND biz_id::bigint % $3 = 0`,
    [from, to, opts.payEvery ?? 2],
  );
  const offset = Date.now() - Number(rows[0]!.now_ms);
  const pending: Promise<void>[] = [];
  for (const r of rows) {
    const at = Number(r.due_ms) + offset + (Math.random() * 2 - 1) * JITTER_MS;
    const id = Number(r.id);
    pending.push(sleep(Math.max(0, at - Date.now())).then(() => pay(id, id % 4 === 0)));
  }
  await Promise.all(pending);
  await payers.end();
  await waitForDrain(s.pool, 30_000, s.colocated);

  const { rows: flips } = await s.pool.query<{ closed_then_paid: number; paid_then_closed: number }>(
    `SELECT count(*) FILTER (WHERE from_status = 'closed' AND to_status = 'paid')::int AS closed_then_paid,
            count(*) FILTER (WHERE from_status = 'paid' AND to_status = 'closed')::int AS paid_then_closed
       FROM order_transitions`,
  );
  const { rows: late } = await s.pool.query<{ p50: number; p99: number; max: number }>(
    `SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0) AS p50,
            coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0) AS p99, coalesce(max(ms), 0) AS max
       FROM (SELECT extract(epoch FROM x.at - t.due_at) * 1000 AS ms
               FROM order_transitions x JOIN ${
                 // orders colocated on the bucket: Citus joins them to the history only on it
                 s.colocated ? 'timeout_center.done_timeouts t ON t.bucket = x.bucket AND' : 'timeout_center.all_timeouts t ON'
               } t.biz_id = x.order_id::text
              WHERE x.to_status = 'closed') l`,
  );
  const deadlock = /deadlock|40P01/i;
  return {
    orders: opts.n,
    payments,
    paid,
    refused,
    payerErrors,
    workerDeadlocks: workers.reduce((n, w) => n + w.lines.filter((l) => deadlock.test(JSON.stringify(l))).length + (deadlock.test(w.stderr) ? 1 : 0), 0),
    closedThenPaid: flips[0]!.closed_then_paid,
    paidThenClosed: flips[0]!.paid_then_closed,
    latenessP50Ms: Math.round(Number(late[0]!.p50)),
    latenessP99Ms: Math.round(Number(late[0]!.p99)),
    latenessMaxMs: Math.round(Number(late[0]!.max)),
  };
}

