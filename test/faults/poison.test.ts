// Scenario 7: one poison row (its close always raises) inside a 500-row shard. The worker splits
// the failing batch in savepoints until the bad row is isolated: the other 499 orders close on
// the first attempt, the poison row is retried with backoff and ends `failed` after its
// attempts, the scan's reduce counts it, and exactly one alert fires.
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
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
      `SELECT count(*) AS n FROM timeout_center.all_timeouts t JOIN orders o ON o.id = t.biz_id::bigint
        WHERE NOT o.poison AND t.state = 'done' AND t.result = 'applied' AND t.attempts = 1 AND t.shard_id = $1`,
      [first[0]!.id],
    );
    expect(healthyFirstTry).toBe(N - 1);

    const { rows: poison } = await s.pool.query<{ state: string; attempts: number; last_error: string }>(
      `SELECT state, attempts, last_error FROM timeout_center.all_timeouts WHERE biz_id = $1`,
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

// A row that kills the worker process (here a code handler that exits when it meets order 13;
// in life a native crash, an out-of-memory kill). The shard's re-run after each death splits its
// pinned rows in two (split_pinned.sql) instead of applying them all again, so the killer ends
// alone in a one-row shard, abandoned after its attempts: it alone fails, its shard mates close.
const KILLER_MODULE = `export default async function (items, ctx) {
  if (items.some((i) => i.bizId === '13')) process.exit(70);
  const { rows } = await ctx.client.query(
    "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id",
    [items.map((i) => i.bizId)],
  );
  return rows.map((r) => String(r.id));
}
`;

describe('a row that kills its worker', () => {
  it('ends failed alone; its shard mates are applied', async () => {
    s = await Scenario.create('fault-killer-row', {
      kind: { shardSize: 16, maxAttempts: 2, timeLimitMs: 1000, handler: { type: 'code', module: './killer.mjs' } },
      worker: { leaseMs: 1500, concurrency: 1, prefetch: 0 },
    });
    writeFileSync(join(dirname(s.configPath), 'killer.mjs'), KILLER_MODULE);
    const scenario = s;
    let deaths = 0;
    let running = true;
    const unexpected: string[] = [];
    // A supervisor: two workers at all times, a new one for each that dies.
    const keep = async (name: string) => {
      for (let i = 0; running; i += 1) {
        const w = scenario.worker(`${name}-${i}`);
        const { code } = await w.exited;
        if (code === 70) deaths += 1;
        else if (running) unexpected.push(`${name}-${i} exited with ${code}: ${w.stderr.slice(0, 500)}`);
      }
    };
    const supervisors = [keep('worker-a'), keep('worker-b')];
    await s.seed(16);
    s.coordinator();
    const deadline = Date.now() + 90_000;
    while (Date.now() < deadline && (await s.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state NOT IN ('done', 'failed')`)) > 0)
      await sleep(300);
    const { rows } = await s.pool.query<{ biz_id: string; state: string; last_error: string | null }>(
      `SELECT biz_id, state, last_error FROM timeout_center.all_timeouts WHERE state = 'failed'`,
    );
    expect(rows.map((r) => r.biz_id)).toEqual(['13']);
    expect(rows[0]!.last_error).toMatch(/abandoned after \d+ attempts/);
    expect(unexpected).toEqual([]);
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(15);
    const splits = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE error_sample LIKE 'split into shards%'`);
    running = false;
    await s.stopAll();
    await Promise.allSettled(supervisors);
    report('7b a row that kills its worker', { timeouts: 16, applied: inv.applied, failed: inv.failed, workerDeaths: deaths, splits, wallMs: s.elapsedMs() });
  }, 150_000);
});
