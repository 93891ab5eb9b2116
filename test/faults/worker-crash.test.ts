// Scenario 1: a worker is SIGKILLed (a) after it took a shard's lease and ran the handler, before
// its transaction commits, and (b) after the commit, before the Redis ACK. Another worker (and the
// coordinator's reaper) must finish everything with no timeout lost and no order closed twice.
// Also a worker frozen (SIGSTOP) past its lease, then thawed: (c) frozen before its transaction,
// its late write is refused by the lease token; (d) frozen inside its transaction, its row locks
// keep every other writer off the shard until it commits, so nothing runs twice either way.
import { afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { procState, report, Scenario, sleep, waitUntil } from './harness.js';

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
    const coordinator = s.coordinator();

    const exit = await victim.exited;
    expect(exit.signal).toBe('SIGKILL');
    expect(victim.stderr).toContain('failpoint worker.after-commit hit: kill');

    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    // The committed shard's message stayed unacknowledged in Redis. Whoever comes first takes it
    // over: the leader's reaper once the victim has had no heartbeat for worker.goneAfterMs (it
    // deletes the gone worker's deliveries; issue 31), or the survivor's XAUTOCLAIM after leaseMs
    // idle (it finds the shard final and acknowledges it).
    await waitUntil(
      "the dead worker's deliveries taken over",
      () =>
        coordinator.lines.some((l) => l.msg === 'took over the shards of gone workers (no heartbeat within worker.goneAfterMs)') ||
        survivor.lines.some((l) => l.msg === 'took over shard deliveries left by a stopped worker'),
      15_000,
    );
    // A committed shard is never re-run: only the victim's other in-flight shard (killed
    // mid-transaction, concurrency 2) may show a second attempt.
    const rerun = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    expect(rerun).toBeLessThanOrEqual(1);
    await s.stopAll();
    report('1b worker SIGKILL after commit, before ACK', { timeouts: N, applied: inv.applied, shardsRerun: rerun, wallMs: s.elapsedMs() });
  });

  it('SIGSTOP after the lease past its expiry, then SIGCONT: the shard is re-run elsewhere and the late write is refused', async () => {
    s = await Scenario.create('fault-worker-paused-lease', { logLevel: 'debug' });
    const victim = s.worker('worker-victim', { failpoints: 'worker.after-lease=1*pause' });
    const survivor = s.worker('worker-survivor');
    await Promise.all([victim.waitForMsg('worker started'), survivor.waitForMsg('worker started')]);
    await s.seed(N);
    s.coordinator();

    await waitUntil('the victim to stop itself', () => procState(victim.pid) === 'T', 15_000);
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    // The frozen worker's shard was taken over once its lease ran out (attempt 2, by the survivor).
    const { rows } = await s.pool.query<{ id: number; owner: string }>(`SELECT id, owner FROM timeout_center.shards WHERE attempts > 1`);
    expect(rows.length).toBeGreaterThanOrEqual(1);
    process.kill(victim.pid, 'SIGCONT');
    // Thawed, it runs its transaction with its old lease token: refused, nothing written.
    const refused = await victim.waitFor(
      (l) => l.msg === 'dropped duplicate shard delivery' && /lease on shard \d+ was lost/.test(String(l['reason'])),
      10_000,
      'lease-lost refusal',
    );
    expect(rows.map((r) => Number(r.id))).toContain(refused['shardId']);
    await sleep(500);
    expect(victim.alive).toBe(true);
    await s.expectInvariants(5000);
    await s.stopAll();
    report('1c worker SIGSTOP after lease, SIGCONT after takeover', {
      timeouts: N,
      applied: inv.applied,
      takenOver: rows.length,
      refusal: refused['reason'],
      wallMs: s.elapsedMs(),
    });
  });

  it('SIGSTOP inside the shard transaction past the lease, then SIGCONT: its locks hold the shard, it commits once, the takeover finds it done', async () => {
    s = await Scenario.create('fault-worker-paused-txn', { logLevel: 'debug' });
    // One slot: the victim holds exactly the shard it froze in (with more slots, a shard leased by
    // another of its slots but not yet locked would rightly be taken over after its lease).
    const victim = s.worker('worker-victim', { failpoints: 'worker.before-commit=1*pause', concurrency: 1 });
    const survivor = s.worker('worker-survivor');
    await Promise.all([victim.waitForMsg('worker started'), survivor.waitForMsg('worker started')]);
    await s.seed(N);
    s.coordinator();

    await waitUntil('the victim to stop itself', () => procState(victim.pid) === 'T', 15_000);
    // Frozen for longer than the lease (3 s) but less than idle_in_transaction_session_timeout
    // (10 s), so its transaction is still alive when it wakes.
    await sleep(4500);
    const stuck = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE state = 'running' AND lease_expires_at < now()`);
    process.kill(victim.pid, 'SIGCONT');
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    // No shard ran twice: the expired lease could not be taken while the victim held the row lock.
    const rerun = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    expect(rerun).toBe(0);
    expect(victim.alive).toBe(true);
    await s.stopAll();
    report('1d worker SIGSTOP inside its transaction past the lease, SIGCONT', {
      timeouts: N,
      applied: inv.applied,
      expiredButLockedShards: stuck,
      shardsRerun: rerun,
      wallMs: s.elapsedMs(),
    });
  });

  it('a shard that kills every worker that runs it: re-runs split it down to one-row shards, each abandoned after its attempts, counted by reduce, alerted', async () => {
    // Every run dies here (the failpoint kills at every commit), so nothing tells a killing row
    // from its mates: the re-runs split the pinned rows (split_pinned.sql) down to one-row shards,
    // and each is abandoned after the kind's max attempts. Kept to 2 rows: 1 + 2 x 2 deaths.
    s = await Scenario.create('fault-worker-crash-loop', { kind: { maxAttempts: 2 }, worker: { concurrency: 1, prefetch: 0 } });
    const scenario = s;
    const n = 2; // one shard
    let running = true;
    let deaths = 0;
    const keep = async (name: string) => {
      for (let i = 0; running; i += 1) {
        const w = scenario.worker(`${name}-${i}`, { failpoints: 'worker.before-commit=kill' });
        if ((await w.exited).signal === 'SIGKILL' && running) deaths += 1;
      }
    };
    const supervisors = [keep('worker-a'), keep('worker-b')];
    await s.seed(n);
    const c = s.coordinator();
    const inv = await s.expectInvariants(60_000);
    running = false;
    expect(inv.failed).toBe(n);
    expect(inv.closed).toBe(0);
    const { rows } = await s.pool.query<{ state: string; size: number; failed_count: number }>(
      `SELECT state, size, failed_count FROM timeout_center.shards WHERE state = 'failed' ORDER BY id`,
    );
    expect(rows).toEqual([
      { state: 'failed', size: 1, failed_count: 1 },
      { state: 'failed', size: 1, failed_count: 1 },
    ]);
    await c.waitForMsg(/^ALERT shard_abandoned/, 10_000);
    await c.waitForMsg(/^ALERT scan_failures/, 10_000);
    await s.stopAll();
    await Promise.allSettled(supervisors);
    report('1e crash loop: split to one-row shards, each abandoned after max attempts', {
      timeouts: n,
      failed: inv.failed,
      workerDeaths: deaths,
      alerts: c.lines.filter((l) => String(l.msg).startsWith('ALERT')).map((l) => l['alert']),
      wallMs: s.elapsedMs(),
    });
  }, 120_000);
});
