// A shard delivered while another statement has its row locked for a moment: the coordinator's
// tick (next_due.sql refreshes the claim floor of queued shards FOR UPDATE) or its reap. The
// lease skips a locked row (take_lease.sql: SKIP LOCKED, so that a duplicate delivery of a running
// shard never waits for its run). The worker then asked hold_shard.sql why, and that statement
// took any shard still queued for one held back by flow control: it unpublished it, and the
// shard waited for the next reap (a second, when a coordinator runs; forever without one). CI
// found it as a shard republished in kind-routing.test.ts. Now only flow control holds a shard;
// one locked for a moment is leased again at once.
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { RedisStreamsChannel } from '../../src/transport/redis-streams.js';
import { KIND, Scenario, sleep, waitUntil } from '../faults/harness.js';
import { killAll } from '../helpers/processes.js';

let s: Scenario;

beforeAll(async () => {
  s = await Scenario.create('lease-lock-race', { worker: { concurrency: 1 } });
});

afterAll(async () => {
  await killAll();
  await s?.close();
});

it('a shard whose row is locked for a moment when its delivery arrives runs once the lock is gone, without a coordinator to republish it', async () => {
  const worker = s.worker('worker-1');
  await worker.waitForMsg('worker started');
  await s.seed(10);
  const { rows: scan } = await s.pool.query<{ id: string }>(
    "INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', now(), 'mapped') RETURNING id",
  );
  const { rows: shard } = await s.pool.query<{ id: string }>(
    `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, published_at, publish_count)
     VALUES ($1, $2, 0, 0, 100, now(), 1) RETURNING id`,
    [scan[0]!.id, KIND],
  );
  const shardId = Number(shard[0]!.id);

  // The coordinator's floor refresh, held a little longer than it takes.
  const tick = new pg.Client({ connectionString: s.databaseUrl });
  await tick.connect();
  const channel = new RedisStreamsChannel({ connection: { mode: 'single', url: s.redisUrl }, keyPrefix: s.prefix, logger: pino({ level: 'silent' }) });
  try {
    await tick.query('BEGIN');
    await tick.query('SELECT id FROM timeout_center.shards WHERE id = $1 FOR UPDATE', [shardId]);
    await channel.init([KIND]);
    await channel.publish([{ shardId, scanId: Number(scan[0]!.id), kind: KIND }]);
    await sleep(800);
    await tick.query('COMMIT');

    const state = async () =>
      (
        await s.pool.query<{ state: string; published: boolean; publish_count: number; attempts: number }>(
          'SELECT state, published_at IS NOT NULL AS published, publish_count, attempts FROM timeout_center.shards WHERE id = $1',
          [shardId],
        )
      ).rows[0]!;
    await waitUntil('the shard is done', async () => (await state()).state === 'done', 10_000).catch(() => {});
    expect(await state(), 'run once, never unpublished as if flow control held it').toEqual({ state: 'done', published: true, publish_count: 1, attempts: 1 });
    expect(await s.count("SELECT count(*) AS n FROM orders WHERE status = 'closed'")).toBe(10);
  } finally {
    await tick.end().catch(() => {});
    await channel.close().catch(() => {});
  }
}, 60_000);
