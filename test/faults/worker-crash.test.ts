// Scenario 1: a worker is SIGKILLed (a) after it took a shard's lease and ran the handler, before
// its transaction commits, and (b) after the commit, before the Redis ACK. Another worker (and the
// coordinator's reaper) must finish everything with no timeout lost and no order closed twice.
import { afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { report, Scenario } from './harness.js';

const N = 3000;
let s: Scenario | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
});

describe('worker killed mid-shard', () => {
  it('SIGKILL after the lease, before commit: the shard is re-run by another worker, applied once', async () => {
    s = await Scenario.create('fault-worker-before-commit');
    const victim = s.worker('worker-victim', { failpoints: 'worker.before-commit=1*kill' });
    const survivor = s.worker('worker-survivor');
    await Promise.all([victim.waitForMsg('worker started'), survivor.waitForMsg('worker started')]);
    await s.seed(N);
    s.coordinator();

    const exit = await victim.exited;
    expect(exit.signal).toBe('SIGKILL');
    expect(victim.stderr).toContain('failpoint worker.before-commit hit: kill');

    const inv = await s.expectInvariants(30_000);
    // The victim's shard(s) ran a second time (attempts 2) and still closed each order once.
    const rerun = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    expect(rerun).toBeGreaterThanOrEqual(1);
    expect(inv.applied).toBe(N);
    await s.stopAll();
    report('1a worker SIGKILL before commit', { timeouts: N, applied: inv.applied, shardsRerun: rerun, wallMs: s.elapsedMs() });
  });

  it('SIGKILL after commit, before ACK: the delivery is taken over and dropped, nothing runs twice', async () => {
    s = await Scenario.create('fault-worker-after-commit');
    const victim = s.worker('worker-victim', { failpoints: 'worker.after-commit=1*kill' });
    const survivor = s.worker('worker-survivor');
    await Promise.all([victim.waitForMsg('worker started'), survivor.waitForMsg('worker started')]);
    await s.seed(N);
    s.coordinator();

    const exit = await victim.exited;
    expect(exit.signal).toBe('SIGKILL');
    expect(victim.stderr).toContain('failpoint worker.after-commit hit: kill');

    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    // The committed shard's message stayed unacknowledged in Redis; the survivor claims it
    // (XAUTOCLAIM after leaseMs idle), finds the shard final and acknowledges it.
    await survivor.waitForMsg('took over shard deliveries left by a stopped worker', 15_000);
    // A committed shard is never re-run: only the victim's other in-flight shard (killed
    // mid-transaction, concurrency 2) may show a second attempt.
    const rerun = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    expect(rerun).toBeLessThanOrEqual(1);
    await s.stopAll();
    report('1b worker SIGKILL after commit, before ACK', { timeouts: N, applied: inv.applied, shardsRerun: rerun, wallMs: s.elapsedMs() });
  });
});
