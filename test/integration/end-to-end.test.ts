// The whole pipeline with real processes: the CLI started as one coordinator and two workers,
// 20,000 orders (90 % unpaid, 10 % paid), timeouts due over the next few seconds, some cancelled,
// some far in the future, and one kind whose handler fails for a few rows.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrdersSchema, CLOSE_SQL, waitForDrain, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const ORDERS = 20_000;
const FLAKY_ORDERS = 1_000; // kind order.flaky: ids 1_000_001..1_001_000, every 100th is poison
const CANCELLED = 500; // due in the window, cancelled before they come due
const FUTURE = 300; // due in an hour

describe('end to end: coordinator + two workers as separate processes', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  const procs: CliProcess[] = [];
  let env: Record<string, string>;
  let configPath: string;

  beforeAll(async () => {
    db = await createTestDatabase('e2e');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix('e2e'),
      logLevel: 'info',
      kinds: {
        'order.unpaid': { shardSize: 500, handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.flaky': { shardSize: 200, maxAttempts: 2, backoffMs: 100, handler: { type: 'sql', sql: CLOSE_SQL } },
      },
      coordinator: { lockTtlMs: 3000, republishAfterMs: 5000 },
      worker: { concurrency: 3, leaseMs: 15_000 },
      alerts: { lagSlaMs: 60_000 },
    });
    env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
  });

  afterAll(() => tearDown({ pool, db }));

  it('closes every due unpaid order exactly once and tells the same story in the views', async () => {
    // Orders: 1..20000, every 10th paid. Flaky kind: 1_000_001..1_001_000, every 100th poison.
    await pool.query(`INSERT INTO orders (id, status) SELECT g, CASE WHEN g % 10 = 0 THEN 'paid' ELSE 'unpaid' END FROM generate_series(1, $1::int) g`, [
      ORDERS,
    ]);
    await pool.query(`INSERT INTO orders (id, status, poison) SELECT 1000000 + g, 'unpaid', g % 100 = 0 FROM generate_series(1, $1::int) g`, [FLAKY_ORDERS]);
    // The processes run before anything is due, as in production.
    procs.push(spawnCli('coordinator', ['coordinator'], env));
    procs.push(spawnCli('worker-1', ['worker'], { ...env }));
    procs.push(spawnCli('worker-2', ['worker'], { ...env }));
    await Promise.all(procs.map((p) => p.waitForMsg(/worker started|became leader/, 20_000)));
    const started = Date.now();

    // Timeouts as a business service writes them: plain SQL, in one transaction with the
    // cancels and reschedules below, so nothing is claimed half-prepared. Due over the next 4 s.
    const tx = await pool.connect();
    await tx.query('BEGIN');
    await tx.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT 'order.unpaid', g::text, clock_timestamp() + interval '1.5 s' + (g % 4000) * interval '1 ms' FROM generate_series(1, $1::int) g`,
      [ORDERS],
    );
    await tx.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT 'order.flaky', (1000000 + g)::text, clock_timestamp() + interval '1.5 s' + (g % 2000) * interval '1 ms' FROM generate_series(1, $1::int) g`,
      [FLAKY_ORDERS],
    );
    // Cancelled before due: these orders are "paid" in the same transaction that cancels.
    await tx.query(`
      WITH c AS (
        UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
         WHERE kind = 'order.unpaid' AND biz_id::bigint % 10 <> 0 AND biz_id::bigint % 37 = 0
           AND biz_id::bigint <= ${CANCELLED * 37}
        RETURNING biz_id)
      SELECT count(*) FROM c`);
    // Far future: moved an hour out (a reschedule).
    await tx.query(
      `UPDATE timeout_center.timeouts SET due_at = now() + interval '1 hour'
        WHERE kind = 'order.unpaid' AND biz_id::bigint % 10 <> 0 AND biz_id::bigint % 37 <> 0
          AND biz_id::bigint BETWEEN 19000 AND 19000 + ${FUTURE * 2} AND biz_id::bigint % 2 = 0`,
    );

    await tx.query('COMMIT');
    tx.release();

    // Wait until everything in the due window (not the far-future ones) is final, then for reduce.
    const deadline = Date.now() + 90_000;
    while (Date.now() < deadline) {
      const { rows } = await pool.query(
        "SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE state IN ('pending', 'dispatched') AND due_at < now() + interval '30 min'",
      );
      if (rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const inv = await waitForDrain(pool, 30_000);
    const drainedMs = Date.now() - started;
    expect(inv.lost, 'due timeouts not final').toBe(0);
    expect(inv.unreducedScans, 'scans not reduced').toBe(0);

    const {
      rows: [counts],
    } = await pool.query(`
      SELECT
        (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND state = 'cancelled')::int AS cancelled,
        (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND due_at > now() + interval '30 min')::int AS future,
        (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND due_at > now() + interval '30 min' AND state = 'pending')::int AS future_pending
    `);
    const cancelled = counts.cancelled as number;
    const future = counts.future as number;
    expect(cancelled).toBeGreaterThan(100);
    expect(future).toBeGreaterThan(100);
    expect(counts.future_pending).toBe(future);

    // Every due unpaid order closed exactly once; paid, cancelled and future untouched.
    const {
      rows: [orders],
    } = await pool.query(`
      SELECT
        (SELECT count(*) FROM orders WHERE id <= ${ORDERS} AND status = 'closed')::int AS closed,
        (SELECT count(*) FROM orders WHERE id <= ${ORDERS} AND id % 10 = 0 AND status <> 'paid')::int AS paid_touched,
        (SELECT count(*) FROM (SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1) x)::int AS doubled,
        (SELECT count(*) FROM order_transitions WHERE from_status = 'paid')::int AS paid_closed,
        (SELECT count(*) FROM timeout_center.all_timeouts t JOIN orders o ON o.id = t.biz_id::bigint
          WHERE t.state IN ('cancelled', 'pending') AND o.status = 'closed')::int AS cancelled_or_future_applied,
        (SELECT count(*) FROM order_transitions)::int AS transitions`);
    const expectedUnpaidClosed = ORDERS - ORDERS / 10 - cancelled - future;
    expect(orders.closed).toBe(expectedUnpaidClosed);
    expect(orders.paid_touched).toBe(0);
    expect(orders.doubled).toBe(0);
    expect(orders.paid_closed).toBe(0);
    expect(orders.cancelled_or_future_applied).toBe(0);

    // The flaky kind: poison rows failed with their error, the rest of their shards closed.
    const { rows: flaky } = await pool.query(`
      SELECT t.state, t.result, o.poison, count(*)::int AS n, min(t.last_error) AS err, max(t.attempts)::int AS attempts
        FROM timeout_center.all_timeouts t JOIN orders o ON o.id = t.biz_id::bigint
       WHERE t.kind = 'order.flaky' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`);
    const poison = flaky.find((r) => r.poison);
    expect(poison).toMatchObject({ state: 'failed', n: FLAKY_ORDERS / 100, attempts: 2 });
    expect(poison!.err).toMatch(/cannot be closed \(poison row\)/);
    expect(flaky.filter((r) => !r.poison)).toEqual([expect.objectContaining({ state: 'done', result: 'applied', n: FLAKY_ORDERS - FLAKY_ORDERS / 100 })]);

    // Reduce: totals equal the rows. Each finished row is counted by exactly one shard.
    const {
      rows: [scans],
    } = await pool.query(`
      SELECT sum(claimed)::int AS claimed, sum(done)::int AS done, sum(skipped)::int AS skipped,
             sum(failed)::int AS failed, sum(retried)::int AS retried, count(*)::int AS scans,
             count(*) FILTER (WHERE state <> 'reduced')::int AS open
        FROM timeout_center.scan_report`);
    const {
      rows: [rowTotals],
    } = await pool.query(`
      SELECT count(*) FILTER (WHERE state = 'done' AND result = 'applied')::int AS applied,
             count(*) FILTER (WHERE state = 'done' AND result = 'skipped')::int AS skipped,
             count(*) FILTER (WHERE state = 'failed')::int AS failed
        FROM timeout_center.all_timeouts`);
    expect(scans.open).toBe(0);
    expect(scans.done).toBe(rowTotals.applied);
    expect(scans.skipped).toBe(rowTotals.skipped);
    expect(scans.failed).toBe(rowTotals.failed);
    expect(scans.claimed).toBe(scans.done + scans.skipped + scans.failed + scans.retried);
    expect(rowTotals.applied).toBe(expectedUnpaidClosed + FLAKY_ORDERS - FLAKY_ORDERS / 100);
    expect(orders.transitions).toBe(rowTotals.applied);

    // The views tell the same story.
    const { rows: shardView } = await pool.query(`
      SELECT state, count(*)::int AS n, sum(done)::int AS done, sum(failed)::int AS failed FROM timeout_center.shard_report GROUP BY state`);
    expect(shardView).toEqual([expect.objectContaining({ state: 'done', done: rowTotals.applied, failed: rowTotals.failed })]);
    const { rows: failedView } = await pool.query('SELECT kind, last_error, scan_id FROM timeout_center.failed_timeouts');
    expect(failedView).toHaveLength(FLAKY_ORDERS / 100);
    expect(failedView.every((r) => r.kind === 'order.flaky' && /poison/.test(r.last_error) && r.scan_id !== null)).toBe(true);
    const { rows: backlog } = await pool.query('SELECT * FROM timeout_center.backlog');
    expect(backlog).toEqual([]);

    // Figures for the closing note.
    const {
      rows: [fig],
    } = await pool.query(`
      SELECT count(*)::int AS n,
             extract(epoch FROM max(finished_at) - min(due_at))::float8 AS span_s,
             extract(epoch FROM max(finished_at - due_at))::float8 AS worst_s,
             extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY finished_at - due_at))::float8 AS p50_s,
             extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY finished_at - due_at))::float8 AS p99_s
        FROM timeout_center.all_timeouts WHERE state = 'done'`);
    console.log(
      `e2e figures: ${fig.n} timeouts finished over ${fig.span_s.toFixed(2)} s of due window+drain ` +
        `(${(fig.n / fig.span_s).toFixed(0)} timeouts/s incl. the 4 s arrival spread), lateness p50 ${(fig.p50_s * 1000).toFixed(0)} ms, ` +
        `p99 ${(fig.p99_s * 1000).toFixed(0)} ms, worst ${(fig.worst_s * 1000).toFixed(0)} ms; drained ${drainedMs} ms after start; ` +
        `${scans.scans} scans`,
    );

    // An alert fired for the failed rows.
    const coordinator = procs[0]!;
    await coordinator.waitFor((l) => l.alert === 'scan_failures', 5000, 'scan_failures alert');

    for (const p of procs) {
      const { code } = await p.stop();
      expect(code, `${p.name} exit code`).toBe(0);
    }
  });
});
