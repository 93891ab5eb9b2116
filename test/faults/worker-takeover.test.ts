// A worker that dies while it holds shards: a lease it took and deliveries it read ahead (pending
// under its consumer in Redis, never leased). Its shards must run again within worker.goneAfterMs
// (3 s by default: no heartbeat for that long) plus one reap, not after worker.leaseMs (30 s here,
// the default), and the map must not count them as covering what is due meanwhile. A steady stream
// of timeouts runs through the death: those due after it close within that bound of their due time.
// The victim froze itself right after its first lease (it never claimed), so the re-run of that shard
// is an ordinary run, not a killer-row suspect: nothing is split.
import { hostname } from 'node:os';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { streamKey } from '../../src/transport/keys.js';
import { killAll } from '../helpers/processes.js';
import { TEST_REDIS_URL } from '../helpers/services.js';
import { KIND, procState, report, Scenario, sleep, waitUntil } from './harness.js';

/** worker.goneAfterMs's default (config.ts), and the reaper's period (recovery.ts). */
const GONE_AFTER_MS = 3000;
const REAP_EVERY_MS = 1000;

let s: Scenario | undefined;
let redis: Redis | undefined;

afterEach(async () => {
  await killAll();
  redis?.disconnect();
  redis = undefined;
  await s?.close();
  s = undefined;
});

describe('a worker that dies holding shards', () => {
  it('SIGKILL with a lease and read-ahead deliveries under a steady stream: its shards run again within goneAfterMs, timeouts due after the death close within that bound, nothing split', async () => {
    // Defaults where they matter: a 30 s lease and a 30 s republish, so that only the takeover of
    // a gone worker can bring its shards back within seconds. A read blocks 10 s, so the frozen
    // victim's read in flight is still there for the next delivery.
    s = await Scenario.create('fault-worker-takeover', {
      worker: { leaseMs: 30_000, concurrency: 2, prefetch: 2, blockMs: 10_000 },
      coordinator: { republishAfterMs: 30_000 },
    });
    redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
    const stream = streamKey(s.prefix, KIND);
    const survivors = [s.worker('worker-a'), s.worker('worker-b')];
    const victim = s.worker('worker-victim', { failpoints: 'worker.after-lease=1*pause' });
    await Promise.all([...survivors, victim].map((w) => w.waitForMsg('worker started')));
    const victimId = `${hostname()}-${victim.pid}`;

    // 200 timeouts a second for 20 s, the first due 1 s from now: on a loaded box the victim may
    // take several seconds to freeze and hold its read-ahead delivery, and the stream must go on
    // well past its death.
    const n = 4000;
    const streamMs = 20_000;
    await s.seed(n, { dueInMs: 1000, spreadMs: streamMs });
    const c = s.coordinator();

    // The victim froze right after its first lease; its XREADGROUP in flight still takes the next
    // delivery, which it will never start. Wait until it holds both, then kill it.
    await waitUntil('the victim to freeze after its first lease', () => procState(victim.pid) === 'T', 15_000);
    let held = 0;
    await waitUntil(
      'the victim to hold a read-ahead delivery beside its lease',
      async () => {
        const pending = (await redis!.call('XPENDING', stream, 'workers', '-', '+', '100', victimId)) as unknown[];
        held = pending.length;
        return held >= 2;
      },
      10_000,
    );
    victim.kill('SIGKILL');
    await victim.exited;
    const { rows: killedAt } = await s.pool.query<{ t: Date }>(`SELECT now() AS t`);
    const death = killedAt[0]!.t;
    const leased = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE owner = $1 AND state = 'running'`, [victimId]);

    // Everything closes well before the 30 s lease would have run out.
    const inv = await s.expectInvariants(50_000);
    expect(inv.applied).toBe(n);

    const { rows } = await s.pool.query<{ due_after: number; worst_ms: number | null; p50_ms: number | null; p99_ms: number | null }>(
      `SELECT count(*)::int AS due_after,
              max(extract(epoch FROM finished_at - due_at) * 1000)::float8 AS worst_ms,
              (percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - due_at)) * 1000)::float8 AS p50_ms,
              (percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - due_at)) * 1000)::float8 AS p99_ms
         FROM timeout_center.done_timeouts WHERE due_at > $1`,
      [death],
    );
    const late = rows[0]!;
    const splits = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE error_sample LIKE 'split into%'`);
    const rerun = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    const figures = {
      timeouts: n,
      victimHeld: { deliveries: held, leased },
      dueAfterDeath: late.due_after,
      latenessAfterDeathMs: { p50: Math.round(late.p50_ms ?? 0), p99: Math.round(late.p99_ms ?? 0), worst: Math.round(late.worst_ms ?? 0) },
      splits,
      shardsRerun: rerun,
      takeoverLog: c.lines.some((l) => String(l.msg).startsWith('took over the shards of gone workers')),
      wallMs: s.elapsedMs(),
    };
    report('worker SIGKILL holding a lease and read-ahead deliveries under a steady stream', figures);

    expect(late.due_after).toBeGreaterThan(1000);
    // Within the bound: the victim is gone goneAfterMs after its last heartbeat (which came before
    // its death), and the next reap, at most a second later, hands its shards on.
    expect(late.worst_ms).toBeLessThan(GONE_AFTER_MS + REAP_EVERY_MS);
    // Its leased shard never reached its claim: the re-run is an ordinary run, nothing is split.
    expect(splits).toBe(0);
    await c.waitForMsg(/^took over the shards of gone workers/, 1000);
    await s.stopAll();
  }, 90_000);

  it('SIGSTOP right after a lease, past goneAfterMs but well inside the 30 s lease, then SIGCONT: taken over within the bound, the late run refused, nothing applied twice', async () => {
    // One slot per worker: the victim freezes holding exactly the one shard it leased (with more
    // slots, a busy box let a second slot lease before the freeze, and the test counts one).
    s = await Scenario.create('fault-worker-frozen-takeover', {
      logLevel: 'debug',
      worker: { leaseMs: 30_000, concurrency: 1 },
      coordinator: { republishAfterMs: 30_000 },
    });
    const victim = s.worker('worker-victim', { failpoints: 'worker.after-lease=1*pause' });
    const survivor = s.worker('worker-survivor');
    await Promise.all([victim.waitForMsg('worker started'), survivor.waitForMsg('worker started')]);
    const victimId = `${hostname()}-${victim.pid}`;
    const n = 3000;
    await s.seed(n);
    const c = s.coordinator();

    await waitUntil('the victim to freeze after its first lease', () => procState(victim.pid) === 'T', 15_000);
    const frozenAt = Date.now();
    const { rows: leased } = await s.pool.query<{ id: string }>(`SELECT id FROM timeout_center.shards WHERE owner = $1 AND state = 'running'`, [victimId]);
    expect(leased.length).toBe(1);
    const shardId = Number(leased[0]!.id);
    // Taken over and run by the survivor while the victim is still frozen, long before its lease.
    await waitUntil(
      'the shard of the frozen worker done by another worker',
      async () =>
        (await s!.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE id = $1 AND state = 'done' AND owner <> $2`, [shardId, victimId])) === 1,
      15_000,
    );
    const takeoverMs = Date.now() - frozenAt;
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(n);
    process.kill(victim.pid, 'SIGCONT');
    // Thawed, it goes on with its old lease token: refused, nothing written.
    const refused = await victim.waitFor(
      (l) => l.msg === 'dropped duplicate shard delivery' && /lease on shard \d+ was lost/.test(String(l['reason'])),
      10_000,
      'lease-lost refusal',
    );
    expect(refused['shardId']).toBe(shardId);
    await sleep(500);
    expect(victim.alive).toBe(true);
    const after = await s.expectInvariants(5000);
    expect(after.applied).toBe(n);
    // The run that froze never claimed: its re-run was an ordinary one.
    const splits = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE error_sample LIKE 'split into%'`);
    expect(splits).toBe(0);
    report('worker SIGSTOP after its lease past goneAfterMs, SIGCONT after the takeover', {
      timeouts: n,
      applied: after.applied,
      takeoverMs,
      refusal: refused['reason'],
      splits,
      wallMs: s.elapsedMs(),
    });
    await c.waitForMsg(/^took over the shards of gone workers/, 1000);
    // Gone after goneAfterMs, handed on by the next reap; the 100-row shard then runs on the survivor.
    expect(takeoverMs).toBeLessThan(GONE_AFTER_MS + REAP_EVERY_MS + 1000);
    await s.stopAll();
  }, 90_000);
});
