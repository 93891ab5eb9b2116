// Leases and liveness of a busy worker (issue 10, items 3, 6, 7):
//   - a shard that runs several times longer than worker.leaseMs keeps its lease (renewed while it
//     runs), is never taken by anyone else, and commits once;
//   - the worker's heartbeat goes on while its only slot is busy;
//   - a duplicate delivery of a shard whose transaction is open returns at once (take_lease skips
//     the locked row) instead of holding a slot and a connection until that commit.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { KIND, report, Scenario, sleep } from '../faults/harness.js';
import { sql } from '../../src/db/queries.js';

const SLOW_SQL =
  "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' AND (SELECT pg_sleep(0.5)) IS NOT NULL RETURNING id";
let s: Scenario;

beforeAll(async () => {
  s = await Scenario.create('lease-renewal', {
    // A poison row makes the shard split: about ten handler calls of 0.5 s each, some 5 s in all,
    // against a 1.5 s lease.
    kind: { shardSize: 16, maxAttempts: 1, timeLimitMs: 1000, handler: { type: 'sql', sql: SLOW_SQL } },
    worker: { leaseMs: 1500, concurrency: 1, prefetch: 0 },
  });
});

afterAll(async () => {
  await killAll();
  await s?.close();
});

describe('a shard longer than its lease', () => {
  it('keeps its lease while it runs, is not re-run, commits once; the heartbeat goes on meanwhile', async () => {
    const worker = s.worker('worker-1');
    await worker.waitForMsg('worker started');
    await s.coordinator().waitForMsg('became leader', 15_000);
    await s.seed(16, { poison: [5] });
    const samples: { expired: number; running: number; lastSeen: number }[] = [];
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const { rows } = await s.pool.query<{ expired: number; running: number; last_seen: number | null; open: number }>(
        `SELECT (SELECT count(*) FROM timeout_center.shards WHERE state = 'running' AND lease_expires_at < now())::int AS expired,
                (SELECT count(*) FROM timeout_center.shards WHERE state = 'running')::int AS running,
                (SELECT extract(epoch FROM max(last_seen_at)) * 1000 FROM timeout_center.workers) AS last_seen,
                (SELECT count(*) FROM timeout_center.all_timeouts WHERE state NOT IN ('done', 'failed', 'cancelled'))::int AS open`,
      );
      const r = rows[0]!;
      if (r.running > 0) samples.push({ expired: r.expired, running: r.running, lastSeen: Number(r.last_seen) });
      if (r.open === 0 && samples.length > 0) break;
      await sleep(150);
    }
    const { rows: shards } = await s.pool.query<{ attempts: number; state: string; ran_ms: number; done_count: number; failed_count: number }>(
      `SELECT attempts, state, extract(epoch FROM finished_at - started_at) * 1000 AS ran_ms, done_count, failed_count
         FROM timeout_center.shards ORDER BY id`,
    );
    const ranMs = Math.max(...shards.map((r) => Number(r.ran_ms)));
    const heartbeatSpan = samples.length > 0 ? Math.max(...samples.map((x) => x.lastSeen)) - Math.min(...samples.map((x) => x.lastSeen)) : 0;
    report('shard longer than its lease', {
      shards: shards.length,
      ranMs: Math.round(ranMs),
      samples: samples.length,
      heartbeatSpanMs: Math.round(heartbeatSpan),
    });
    expect(ranMs, 'the shard ran several leases long').toBeGreaterThan(3000);
    expect(
      samples.filter((x) => x.expired > 0),
      'a running shard never showed an expired lease',
    ).toEqual([]);
    expect(
      shards.every((r) => r.attempts === 1 && r.state === 'done'),
      JSON.stringify(shards),
    ).toBe(true);
    const closed = await s.count(`SELECT count(*) AS n FROM order_transitions WHERE to_status = 'closed'`);
    expect(closed).toBe(15);
    expect(await s.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'failed'`)).toBe(1);
    // The worker's only slot was busy all along, and its heartbeat (every 5 s) still moved.
    expect(heartbeatSpan, 'last_seen_at advanced while the slot was busy').toBeGreaterThanOrEqual(3000);
    expect(worker.lines.filter((l) => /lease .*lost/.test(String(l.msg)))).toEqual([]);
    await s.stopAll();
  }, 90_000);
});

describe('a duplicate delivery of a running shard', () => {
  it('take_lease returns at once (SKIP LOCKED) while the shard transaction holds the row', async () => {
    const { rows: scan } = await s.pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
    // attempts 0: the kind's max attempts (1 here) is not used up, so an expired lease may be taken.
    const { rows: shard } = await s.pool.query<{ id: number; lease_token: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state, owner, lease_token, lease_expires_at, attempts, started_at)
       VALUES ($1, $2, 0, 0, 10, 'running', 'w1', gen_random_uuid(), now() - interval '1 s', 0, now()) RETURNING id, lease_token::text`,
      [scan[0].id, KIND],
    );
    const lockShard = sql('worker/lock_shard', { shardId: shard[0]!.id, leaseToken: shard[0]!.lease_token });
    const takeLease = sql('worker/take_lease', { shardId: shard[0]!.id, workerId: 'w2', leaseMs: 1000 });
    const running = new pg.Client({ connectionString: s.databaseUrl });
    const duplicate = new pg.Client({ connectionString: s.databaseUrl, statement_timeout: 5000 });
    await running.connect();
    await duplicate.connect();
    try {
      await running.query('BEGIN');
      expect((await running.query(lockShard)).rowCount).toBe(1);
      const t0 = performance.now();
      const taken = await duplicate.query(takeLease);
      const ms = performance.now() - t0;
      expect(taken.rowCount).toBe(0);
      expect(ms).toBeLessThan(2500);
      await running.query('ROLLBACK');
      // Once the row is free, the expired lease is taken as before.
      expect((await duplicate.query(takeLease)).rowCount).toBe(1);
    } finally {
      await running.end();
      await duplicate.end();
    }
  });
});

describe('a heartbeat that fails', () => {
  it('is logged as a PostgreSQL failure, not a Redis one', async () => {
    const worker = s.worker('worker-hb');
    await worker.waitForMsg('worker started');
    // The heartbeat's table is missing for a while: PostgreSQL refuses the heartbeat, Redis is fine.
    await s.pool.query('ALTER TABLE timeout_center.workers RENAME TO workers_away');
    try {
      const line = await worker.waitForMsg(/heartbeat failed/, 15_000);
      expect(String(line.msg)).toMatch(/^PostgreSQL: /);
    } finally {
      await s.pool.query('ALTER TABLE timeout_center.workers_away RENAME TO workers');
    }
    // No Redis warning (the start's info line naming the Redis mode is not one).
    expect(worker.lines.filter((l) => Number(l.level) >= 40 && /^Redis|Redis unreachable/.test(String(l.msg)))).toEqual([]);
    await s.stopAll();
  }, 60_000);
});
