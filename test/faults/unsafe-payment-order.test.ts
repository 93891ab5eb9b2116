// The payment the README taught before issue 10: pay first (unguarded), then cancel the timeout.
// It takes the order's lock before the timeout's, the opposite of a worker (claim, then handler),
// so it deadlocked with shards: each deadlock cost the shard a full deadlock_timeout (1 s) and
// PostgreSQL could pick either side as the victim. The worker's handler now gives up a lock wait
// after 100 ms (HANDLER_LOCK_TIMEOUT_MS, below deadlock_timeout) and retries the shard, which
// releases the timeout rows so the payer goes on: no deadlock on either side. (The unguarded
// payment still turns closed orders into paid ones: only the README's guard prevents that, which
// is why the README teaches it; the figure is reported, not asserted.)
import { afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { paymentRace } from '../docs/payment-race.js';
import { report, Scenario } from './harness.js';

const UNSAFE_PAYMENT = `BEGIN;
UPDATE orders SET status = 'paid' WHERE id = 42;
UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
 WHERE kind = 'order.unpaid' AND biz_id = '42' AND state IN ('pending', 'dispatched');
COMMIT;`;

let s: Scenario | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
});

describe('the unsafe payment order (pay, then cancel)', () => {
  it('does not deadlock with the workers: their handlers give up a lock wait before deadlock_timeout', async () => {
    s = await Scenario.create('unsafe-payment', { kind: { shardSize: 50 }, worker: { concurrency: 3 } });
    const workers = [s.worker('worker-1'), s.worker('worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    await s.coordinator().waitForMsg('became leader', 15_000);
    const figures = await paymentRace(s, workers, UNSAFE_PAYMENT, { n: 2000, spreadMs: 2000 });
    report('unsafe payment order (pay, then cancel) at the due instant', { ...figures });
    expect(figures.workerDeadlocks).toBe(0);
    expect(figures.payerErrors['40P01'] ?? 0).toBe(0);
    await s.stopAll();
  }, 120_000);
});
