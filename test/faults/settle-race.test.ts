// Settle on read racing the scan (issue 33): at the instant a flood falls due, two workers apply
// their shards (each holding its commit 100 ms, so settles meet locked rows), four readers settle
// every order in their own random order, and two payers pay a fifth of them (half cancel the
// timeout first, the other half only pay, guarded). The handler is not idempotent: it adds one to
// orders.closes each time it runs on an order (guarded against paid orders only, not against
// closed ones), so a second application anywhere would show. After the drain: each order changed
// at most once, closes is 1 exactly for the orders the history says were applied (by a shard or a
// settle), a paid order was never closed, and both a shard and a settle applied some.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { settle, type SettleOutcome } from '../../src/settle/settle.js';
import { killAll } from '../helpers/processes.js';
import { KIND, report, Scenario, sleep } from './harness.js';

const N = 600;
const NON_IDEMPOTENT = "UPDATE orders SET status = 'closed', closes = closes + 1 WHERE id = ANY($1) AND status <> 'paid' RETURNING id";
let s: Scenario | undefined;
let readers: pg.Pool | undefined;

afterAll(async () => {
  await killAll();
  await readers?.end().catch(() => {});
  await s?.close();
});

function shuffled(n: number): number[] {
  const ids = Array.from({ length: n }, (_, i) => i + 1);
  for (let i = ids.length - 1; i > 0; i -= 1) {
    const j = Math.floor(Math.random() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  return ids;
}

describe('settle racing two workers and a payer at the due instant', () => {
  it('never applies a timeout twice, and the history equals the orders', async () => {
    s = await Scenario.create('fault-settle-race', { kind: { shardSize: 50, handler: { type: 'sql', sql: NON_IDEMPOTENT } }, worker: { concurrency: 2 } });
    await s.pool.query('ALTER TABLE orders ADD COLUMN closes integer NOT NULL DEFAULT 0');
    const workers = [
      s.worker('worker-1', { failpoints: 'worker.before-commit=sleep(100)' }),
      s.worker('worker-2', { failpoints: 'worker.before-commit=sleep(100)' }),
    ];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    const coordinator = s.coordinator();
    await coordinator.waitForMsg('became leader', 15_000);

    readers = new pg.Pool({ connectionString: s.databaseUrl, max: 8, application_name: 'reader' });
    readers.on('error', () => {});
    const pool = readers;
    // Connections opened before the instant (the box may be loaded: nothing waits on a connect then).
    const warm = await Promise.all(Array.from({ length: 8 }, () => pool.connect()));
    await Promise.all(warm.map((c) => c.query('SELECT 1')));
    warm.forEach((c) => c.release());
    const DUE_IN = 2000;
    await s.seed(N, { dueInMs: DUE_IN });
    // The instant on this clock, from the database's (the seed itself takes a while on a loaded box).
    const { rows: due } = await s.pool.query<{ ms: number }>(`SELECT extract(epoch FROM min(due_at) - now()) * 1000 AS ms FROM timeout_center.timeouts`);
    const dueAt = Date.now() + Number(due[0]!.ms);

    const outcomes: Record<string, number> = {};
    const firstAt: Record<string, number> = {};
    const count = (o: SettleOutcome) => (outcomes[o] = (outcomes[o] ?? 0) + 1);
    const reader = async (): Promise<void> => {
      await sleep(Math.max(0, dueAt - Date.now() - 300));
      for (const id of shuffled(N)) {
        for (;;) {
          // A row a worker holds is waited for 50 ms, then left to it (busy).
          const r = await settle(pool, KIND, id, { waitMs: 50 });
          count(r.outcome);
          if (!firstAt[r.outcome]) firstAt[r.outcome] = Math.round(Date.now() - dueAt);
          if (r.outcome !== 'not_due') break;
          await sleep(2);
        }
      }
    };
    const paid = new Set<number>();
    const payer = async (ids: number[]): Promise<void> => {
      await sleep(Math.max(0, dueAt - Date.now() - 30));
      for (const id of ids) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          let ok: boolean;
          if (id % 2 === 0) {
            // The payment protocol: cancel the timeout first, then the guarded payment.
            const c = await client.query(
              `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
                WHERE kind = $1 AND biz_id = $2 AND state IN ('pending', 'dispatched') RETURNING id`,
              [KIND, String(id)],
            );
            const p = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid' RETURNING id`, [id]);
            ok = c.rowCount === 1 && p.rowCount === 1;
          } else {
            const p = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid' RETURNING id`, [id]);
            ok = p.rowCount === 1;
          }
          await client.query(ok ? 'COMMIT' : 'ROLLBACK');
          if (ok) paid.add(id);
        } finally {
          client.release();
        }
      }
    };
    const toPay = shuffled(N).slice(0, N / 5);
    await Promise.all([reader(), reader(), reader(), reader(), payer(toPay.slice(0, N / 10)), payer(toPay.slice(N / 10))]);

    const inv = await s.expectInvariants(60_000);
    const { rows } = await s.pool.query<{ id: string; status: string; closes: number; applied: number; settled: number; history: number }>(
      `SELECT o.id, o.status, o.closes,
              count(d.id) FILTER (WHERE d.result = 'applied')::int AS applied,
              count(d.id) FILTER (WHERE d.result = 'applied' AND d.settled_by IS NOT NULL)::int AS settled,
              count(d.id)::int AS history
         FROM orders o LEFT JOIN timeout_center.done_timeouts d ON d.biz_id = o.id::text AND d.kind = $1
        GROUP BY o.id, o.status, o.closes`,
      [KIND],
    );
    const doubled = rows.filter((r) => r.closes > 1);
    const untrue = rows.filter((r) => r.closes !== r.applied || r.history > 1);
    const paidClosed = rows.filter((r) => r.status === 'paid' && r.closes > 0);
    const bySettle = rows.reduce((n, r) => n + r.settled, 0);
    const byShard = rows.reduce((n, r) => n + r.applied - r.settled, 0);
    const { rows: fin } = await s.pool.query(
      `SELECT (extract(epoch FROM min(finished_at - due_at))*1000)::int AS first, (extract(epoch FROM max(finished_at - due_at))*1000)::int AS last FROM timeout_center.done_timeouts`,
    );
    report('settle race', { ...inv, outcomes, firstAt, fin: fin[0], paid: paid.size, appliedBySettle: bySettle, appliedByShard: byShard });
    expect(doubled, 'orders the handler ran on twice').toEqual([]);
    expect(untrue, 'orders whose closes differ from their applied history').toEqual([]);
    expect(paidClosed, 'paid orders closed').toEqual([]);
    expect(rows.filter((r) => paid.has(Number(r.id)) && r.status !== 'paid')).toEqual([]);
    // The race happened: both a settle and a shard applied some, and settles met rows a worker
    // or another reader held or had just finished.
    expect(bySettle).toBeGreaterThan(0);
    expect(paid.size).toBeGreaterThan(0);
    expect(byShard).toBeGreaterThan(0);
    expect((outcomes['already_final'] ?? 0) + (outcomes['not_found'] ?? 0)).toBeGreaterThan(0);
    await s.stopAll();
  }, 120_000);
});
