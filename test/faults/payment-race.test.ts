// Scenario 6: payments committing at the same instant as the close of their order, in both orders
// of arrival, many times. Orders fall due over 3 s; ten payers keep paying orders that are due
// right now, each payment holding its transaction open 0-60 ms, while workers hold every close
// 100 ms before COMMIT. So a payment often waits on a close's row lock (the close wins; the
// payment must see 'closed' and change nothing) and a close often waits on a payment's lock (the
// payment wins; the close must re-check and skip the paid order).
// Even orders are paid the recommended way (cancel the timeout, then pay, in one transaction:
// the same lock order as the worker); odd orders only pay, and the close's conditional UPDATE
// alone must guard them.
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { KIND, report, Scenario, sleep } from './harness.js';

const N = 2000;
const SPREAD_MS = 3000;
const PAYERS = 10;
let s: Scenario | undefined;
let payers: pg.Pool | undefined;

afterEach(async () => {
  await killAll();
  await payers?.end().catch(() => {});
  payers = undefined;
  await s?.close();
  s = undefined;
});

interface Attempt {
  id: number;
  paid: boolean;
  /** ms the payment's first statement took (long: it waited on the close's row lock). */
  waitMs: number;
}

describe('payment racing the close', () => {
  it('no paid order is ever closed and no closed order is paid, whichever commits first', async () => {
    s = await Scenario.create('fault-payment-race', { kind: { shardSize: 50 }, worker: { concurrency: 4 } });
    const workers = [
      s.worker('worker-1', { failpoints: 'worker.before-commit=sleep(100)' }),
      s.worker('worker-2', { failpoints: 'worker.before-commit=sleep(100)' }),
    ];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    const coordinator = s.coordinator();
    await coordinator.waitForMsg('became leader', 15_000);

    payers = new pg.Pool({ connectionString: s.databaseUrl, max: PAYERS, application_name: 'payer' });
    payers.on('error', () => {});
    const pool = payers;
    const t0 = Date.now() + 300;
    await s.seed(N, { dueInMs: 300, spreadMs: SPREAD_MS });

    const attempts: Attempt[] = [];
    const tried = new Set<number>();
    let waitsSampled = { closeBehindPayment: 0, paymentBehindClose: 0 };
    let running = true;

    const pay = async (id: number): Promise<void> => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const started = performance.now();
        let paid: boolean;
        if (id % 2 === 0) {
          const c = await client.query(
            `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
              WHERE kind = $1 AND biz_id = $2 AND state IN ('pending', 'dispatched') RETURNING id`,
            [KIND, String(id)],
          );
          const p = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid' RETURNING id`, [id]);
          paid = c.rowCount === 1 && p.rowCount === 1;
        } else {
          const p = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid' RETURNING id`, [id]);
          paid = p.rowCount === 1;
        }
        const waitMs = performance.now() - started;
        if (!paid) {
          // The order was closed first: the payment is refused (refunded), nothing changes.
          await client.query('ROLLBACK');
        } else {
          await client.query('SELECT pg_sleep($1)', [Math.random() * 0.06]);
          await client.query('COMMIT');
        }
        attempts.push({ id, paid, waitMs });
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        client.release();
      }
    };

    // Half the payers pay orders falling due right now (their close is not yet under way: the
    // payment usually comes first); the other half pay orders whose timeout is due and waiting for
    // or inside a running shard, the oldest first (the close is under way: it usually comes first).
    let underWay: number[] = [];
    const refresher = async () => {
      while (running) {
        const { rows } = await s!.pool.query<{ id: number }>(
          `SELECT biz_id::bigint AS id FROM timeout_center.all_timeouts
            WHERE kind = $1 AND state = 'pending' AND available_at <= now() ORDER BY available_at LIMIT 300`,
          [KIND],
        );
        underWay = rows.map((r) => Number(r.id)).filter((id) => !tried.has(id));
        await sleep(20);
      }
    };
    const pick = (n: number): number | undefined => {
      if (n % 2 === 1) {
        while (underWay.length > 0) {
          const id = underWay.splice(Math.floor(Math.random() * underWay.length), 1)[0]!;
          if (!tried.has(id)) return id;
        }
        return undefined;
      }
      const now = Math.floor(((Date.now() - t0) / SPREAD_MS) * (N - 1)) + 1;
      for (let i = 0; i < 5; i += 1) {
        const id = now + Math.floor(Math.random() * 40) - 20;
        if (id >= 1 && id <= N && !tried.has(id)) return id;
      }
      return undefined;
    };
    const payer = async (_: unknown, n: number) => {
      while (running) {
        const id = pick(n);
        if (id === undefined) {
          await sleep(2);
          continue;
        }
        tried.add(id);
        await pay(id).catch((err: unknown) => {
          running = false;
          throw err;
        });
      }
    };
    // Who waits on whom, sampled from pg_stat_activity.
    const sampler = async () => {
      const c = new pg.Client({ connectionString: s!.databaseUrl });
      await c.connect();
      try {
        while (running) {
          const { rows } = await c.query<{ w: number; p: number }>(
            `SELECT count(*) FILTER (WHERE application_name ~ '^timeout-center(/[^ ]+)? worker$')::int AS w,
                    count(*) FILTER (WHERE application_name = 'payer')::int AS p
               FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
          );
          waitsSampled = { closeBehindPayment: waitsSampled.closeBehindPayment + rows[0]!.w, paymentBehindClose: waitsSampled.paymentBehindClose + rows[0]!.p };
          await sleep(10);
        }
      } finally {
        await c.end();
      }
    };
    const stopAt = t0 + SPREAD_MS + 300;
    const tasks = [...Array.from({ length: PAYERS }, payer), sampler(), refresher()];
    await sleep(Math.max(0, stopAt - Date.now()));
    running = false;
    await Promise.all(tasks);
    await pool.end();
    payers = undefined;

    const inv = await s.expectInvariants(30_000);
    const paid = attempts.filter((a) => a.paid);
    const refused = attempts.filter((a) => !a.paid);
    // Close first: refused payments, and those that had waited on the close's lock.
    const refusedAfterWait = refused.filter((a) => a.waitMs >= 50).length;
    // Payment first, with the close already under way: paid orders whose timeout had been claimed.
    const { rows } = await s.pool.query<{ claimed_then_paid: number; skipped: number; cancelled_in_flight: number; paid_orders: number }>(
      `SELECT count(*) FILTER (WHERE t.shard_id IS NOT NULL)::int AS claimed_then_paid,
              count(*) FILTER (WHERE t.state = 'done' AND t.result = 'skipped')::int AS skipped,
              count(*) FILTER (WHERE t.state = 'cancelled' AND t.shard_id IS NOT NULL)::int AS cancelled_in_flight,
              count(*)::int AS paid_orders
         FROM orders o JOIN timeout_center.all_timeouts t ON t.biz_id = o.id::text
        WHERE o.status = 'paid'`,
    );
    const race = rows[0]!;
    expect(race.paid_orders).toBe(paid.length);
    // Every order ends either paid (never closed) or closed (never paid).
    const bad = await s.count(
      `SELECT count(*) AS n FROM orders o WHERE o.status NOT IN ('paid', 'closed')
          OR (o.status = 'paid' AND o.closed_at IS NOT NULL)
          OR EXISTS (SELECT 1 FROM order_transitions x WHERE x.order_id = o.id AND x.from_status <> 'unpaid')`,
    );
    expect(bad).toBe(0);
    expect(inv.applied + paid.length).toBe(N);
    // Both orders of arrival happened many times.
    expect(refused.length).toBeGreaterThanOrEqual(20);
    expect(race.claimed_then_paid).toBeGreaterThanOrEqual(20);
    expect(refusedAfterWait).toBeGreaterThanOrEqual(5);
    // And a close was seen waiting on a payment's row lock (sampled, so only "at least once").
    expect(waitsSampled.closeBehindPayment).toBeGreaterThanOrEqual(1);
    await s.stopAll();
    report('6 payment vs close race', {
      orders: N,
      paymentsTried: attempts.length,
      paid: paid.length,
      refusedClosedFirst: refused.length,
      refusedAfterWaitingOnClose: refusedAfterWait,
      paidWhileClaimed: race.claimed_then_paid,
      closeSkippedPaidOrder: race.skipped,
      cancelledWhileDispatched: race.cancelled_in_flight,
      lockWaitSamples: waitsSampled,
      closed: inv.applied,
      wallMs: s.elapsedMs(),
    });
  });
});
