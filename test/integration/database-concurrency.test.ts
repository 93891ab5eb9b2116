// worker.databaseConcurrency: shards whose handler runs in the center's own PostgreSQL run at most
// that many at once per worker, whatever worker.concurrency allows (they spend the database's CPU;
// bench/analysis.md). A slow SQL handler (one 300 ms sleep per shard) makes the running shards
// visible in timeout_center.shards; the test samples them while 1,000 timeouts drain.
import { afterAll, describe, expect, it } from 'vitest';
import { Scenario } from '../faults/harness.js';
import { killAll } from '../helpers/processes.js';

const SLOW_CLOSE =
  "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' AND (SELECT pg_sleep(0.3)) IS NOT NULL RETURNING id";

async function drainSampling(s: Scenario, n: number): Promise<{ maxRunning: number; samples: number }> {
  await s.seed(n);
  s.coordinator();
  const worker = s.worker();
  await worker.waitForMsg('worker started', 20_000);
  let maxRunning = 0;
  let samples = 0;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const running = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'running'`);
    maxRunning = Math.max(maxRunning, running);
    samples += 1;
    const left = await s.count(`SELECT count(*) AS n FROM orders WHERE status = 'unpaid'`);
    if (left === 0 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  await s.expectInvariants();
  return { maxRunning, samples };
}

describe('worker.databaseConcurrency', () => {
  const scenarios: Scenario[] = [];
  afterAll(async () => {
    // Every process it started goes, or it would keep polling (and loading the box) after the file.
    for (const s of scenarios) await s.stopAll();
    const leaked = await killAll();
    for (const s of scenarios) await s.close();
    expect(leaked, 'processes still running after the test').toEqual([]);
  });

  it('runs at most 2 same-database shards at once by default, with worker.concurrency 6', async () => {
    const s = await Scenario.create('db-concurrency-default', {
      kind: { shardSize: 50, handler: { type: 'sql', sql: SLOW_CLOSE } },
      worker: { concurrency: 6 },
    });
    scenarios.push(s);
    const { maxRunning, samples } = await drainSampling(s, 1000);
    expect(samples).toBeGreaterThan(20);
    expect(maxRunning).toBe(2);
  });

  it('follows the setting: 4 at once with databaseConcurrency 4', async () => {
    const s = await Scenario.create('db-concurrency-4', {
      kind: { shardSize: 50, handler: { type: 'sql', sql: SLOW_CLOSE } },
      worker: { concurrency: 6, databaseConcurrency: 4 },
    });
    scenarios.push(s);
    const { maxRunning } = await drainSampling(s, 1000);
    expect(maxRunning).toBe(4);
  });
});
