// Scenario 7: one poison row (its close always raises) inside a 500-row shard. The worker splits
// the failing batch in savepoints until the bad row is isolated: the other 499 orders close on
// the first attempt, the poison row is retried with backoff and ends `failed` after its
// attempts, the scan's reduce counts it, and exactly one alert fires.
import { afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { report, Scenario, sleep } from './harness.js';

const N = 500;
const POISON = 250;
const MAX_ATTEMPTS = 3;
let s: Scenario | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
});

describe('poison row', () => {
  it('499 close on the first attempt, the poison row fails after its attempts, one alert', async () => {
    s = await Scenario.create('fault-poison', { kind: { shardSize: 500, maxAttempts: MAX_ATTEMPTS, backoffMs: 100 } });
    const worker = s.worker();
    await worker.waitForMsg('worker started');
    await s.seed(N, { poison: [POISON] });
    const c = s.coordinator();

    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N - 1);
    expect(inv.failed).toBe(1);

    // One 500-row shard, and every healthy row closed by it, on attempt 1.
    const { rows: first } = await s.pool.query<{ id: number; size: number; done_count: number; retried_count: number; failed_count: number }>(
      `SELECT id, size, done_count, retried_count, failed_count FROM timeout_center.shards ORDER BY id LIMIT 1`,
    );
    expect(first[0]).toMatchObject({ size: N, done_count: N - 1, retried_count: 1, failed_count: 0 });
    const healthyFirstTry = await s.count(
      `SELECT count(*) AS n FROM timeout_center.timeouts t JOIN orders o ON o.id = t.biz_id::bigint
        WHERE NOT o.poison AND t.state = 'done' AND t.result = 'applied' AND t.attempts = 1 AND t.shard_id = $1`,
      [first[0]!.id],
    );
    expect(healthyFirstTry).toBe(N - 1);

    const { rows: poison } = await s.pool.query<{ state: string; attempts: number; last_error: string }>(
      `SELECT state, attempts, last_error FROM timeout_center.timeouts WHERE biz_id = $1`,
      [String(POISON)],
    );
    expect(poison[0]).toMatchObject({ state: 'failed', attempts: MAX_ATTEMPTS });
    expect(poison[0]!.last_error).toContain('poison row');
    const { rows: order } = await s.pool.query<{ status: string }>(`SELECT status FROM orders WHERE id = $1`, [POISON]);
    expect(order[0]!.status).toBe('unpaid');

    // One alert: the scan in which the poison row failed for good.
    const alert = await c.waitForMsg(/^ALERT /, 10_000);
    await sleep(1500); // room for a wrong second alert to show up
    const alerts = c.lines.filter((l) => String(l.msg).startsWith('ALERT '));
    expect(alerts).toHaveLength(1);
    expect(alert['alert']).toBe('scan_failures');
    const scans = await s.count(`SELECT count(*) AS n FROM timeout_center.scans`);
    await s.stopAll();
    report('7 poison row in a 500-row shard', {
      shardSize: N,
      closedFirstAttempt: healthyFirstTry,
      poisonAttempts: poison[0]!.attempts,
      scans,
      alerts: alerts.map((a) => a.msg),
      wallMs: s.elapsedMs(),
    });
  });
});
