// Scenarios 2 and 3: the coordinator dies between mapping in PostgreSQL and publishing to Redis;
// and the coordinator is frozen (SIGSTOP) past its lock lifetime while a standby takes over, then
// thawed (SIGCONT): its next write must be refused by the fencing epoch and it must step down.
import { afterEach, describe, expect, it } from 'vitest';
import { killAll, type LogLine } from '../helpers/processes.js';
import { procState, report, Scenario, waitUntil } from './harness.js';

const N = 3000;
let s: Scenario | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
});

const leaderEpoch = (l: LogLine) => Number(l['epoch']);

describe('coordinator faults', () => {
  it('SIGKILL between the map (committed) and publish: the standby takes over and republishes from PostgreSQL', async () => {
    s = await Scenario.create('fault-coordinator-before-publish');
    const a = s.coordinator('coordinator-a', { failpoints: 'coordinator.before-publish=1*kill' });
    const first = await a.waitForMsg('became leader', 15_000);
    const b = s.coordinator('coordinator-b');
    s.worker('worker-1');
    s.worker('worker-2');
    await s.seed(N);

    const exit = await a.exited;
    expect(exit.signal).toBe('SIGKILL');
    expect(a.stderr).toContain('failpoint coordinator.before-publish hit: kill');
    // What A mapped is in PostgreSQL only: queued shards of A's scan that no worker has heard of.
    const stranded = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'queued' AND publish_count = 1`);

    const second = await b.waitForMsg('became leader', 15_000);
    expect(leaderEpoch(second)).toBeGreaterThan(leaderEpoch(first));
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    // The stranded shards went out again from PostgreSQL (publish_count 2), and A's scan was
    // reduced by the new leader.
    const republished = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE publish_count > 1`);
    expect(republished).toBeGreaterThanOrEqual(1);
    const aScans = await s.count(`SELECT count(*) AS n FROM timeout_center.scans WHERE epoch = $1 AND state = 'reduced'`, [leaderEpoch(first)]);
    expect(aScans).toBe(1);
    await s.stopAll();
    report('2 coordinator SIGKILL between map and publish', {
      timeouts: N,
      applied: inv.applied,
      strandedShards: stranded,
      republishedShards: republished,
      epochs: [leaderEpoch(first), leaderEpoch(second)],
      wallMs: s.elapsedMs(),
    });
  });

  it('a tick that fails between the map and publishing (a Redis or PostgreSQL blip) leaves no scan open forever', async () => {
    s = await Scenario.create('fault-coordinator-tick-error');
    // The scan and its shards commit, then the tick throws before publishing; the same
    // coordinator keeps leading under the same epoch, and the reaper republishes the shards.
    const c = s.coordinator('coordinator', { failpoints: 'coordinator.before-publish=1*error(injected: connection lost after the map)' });
    await c.waitForMsg('became leader', 15_000);
    s.worker('worker-1');
    await s.seed(N);
    await c.waitForMsg('coordinator tick failed; the next tick retries', 15_000);
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    expect(c.lines.filter((l) => l.msg === 'became leader')).toHaveLength(1);
    await s.stopAll();
    report('2b coordinator tick error between map and publish', { timeouts: N, applied: inv.applied, wallMs: s.elapsedMs() });
  });

  it('SIGSTOP past the lock lifetime, standby takes over, SIGCONT: the stale write is fenced off and the old leader steps down', async () => {
    s = await Scenario.create('fault-coordinator-paused');
    // A freezes itself right before its first map, after it read the clock and its epoch.
    const a = s.coordinator('coordinator-a', { failpoints: 'coordinator.before-plan=1*pause' });
    const first = await a.waitForMsg('became leader', 15_000);
    const b = s.coordinator('coordinator-b');
    s.worker('worker-1');
    s.worker('worker-2');
    await s.seed(N);

    await waitUntil('coordinator A to stop itself', () => procState(a.pid) === 'T', 15_000);
    const pausedAt = Date.now();
    // B wins the lock once A's lease ran out (lockTtlMs 2000) and bumps the epoch.
    const second = await b.waitForMsg('became leader', 15_000);
    expect(leaderEpoch(second)).toBeGreaterThan(leaderEpoch(first));
    // B does all the work while A is frozen.
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    // Keep A frozen for longer than the lock lifetime (2000 ms) whatever the pace of the work above:
    // B winning the lock already shows A's lock ran out; this makes the pause itself exceed it.
    const pausedMs = Date.now() - pausedAt;
    if (pausedMs < 2500) await new Promise((r) => setTimeout(r, 2500 - pausedMs));

    // Thaw A: it carries on with the map it was about to write, under its old epoch.
    process.kill(a.pid, 'SIGCONT');
    const fenced = await a.waitForMsg(/^fenced: write refused/, 15_000);
    expect(fenced['epoch']).toBe(leaderEpoch(first));
    expect(fenced['currentEpoch']).toBe(leaderEpoch(second));
    const down = await a.waitForMsg('stepped down as leader', 5000);
    expect(down['reason']).toMatch(/fenced|expired|renew/);
    // Nothing was written under A's epoch: every scan belongs to B.
    const staleScans = await s.count(`SELECT count(*) AS n FROM timeout_center.scans WHERE epoch <> $1`, [leaderEpoch(second)]);
    expect(staleScans).toBe(0);
    // A stays a standby: it does not win the lock back while B renews it.
    await new Promise((r) => setTimeout(r, 1500));
    expect(a.lines.filter((l) => l.msg === 'became leader')).toHaveLength(1);
    expect(a.alive).toBe(true);
    await s.expectInvariants(5000);
    await s.stopAll();
    report('3 coordinator SIGSTOP/SIGCONT, fenced', {
      timeouts: N,
      applied: inv.applied,
      pausedMs,
      staleEpoch: leaderEpoch(first),
      newEpoch: leaderEpoch(second),
      refused: fenced.msg,
      wallMs: s.elapsedMs(),
    });
  });
});
