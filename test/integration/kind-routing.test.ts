// Kinds served by some workers only (worker.kinds) are routed to those workers: one stream per
// kind, and a worker reads only its kinds' streams. Two kinds with disjoint workers: no shard is
// ever leased by a worker that does not serve it (before, such a worker leased the shard, gave it
// back, and the coordinator republished it a second later, without bound).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, waitForDrain, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';

const CONFIRM_SQL = "UPDATE orders SET status = 'confirmed' WHERE id = ANY($1) AND status = 'shipped' RETURNING id";
let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string | undefined>;

function config(workerKinds?: string[]): string {
  return writeConfig({
    redisKeyPrefix: prefix,
    kinds: {
      'order.unpaid': { shardSize: 20, timeLimitMs: 2000, handler: { type: 'sql', sql: CLOSE_SQL } },
      'order.unconfirmed': { shardSize: 20, timeLimitMs: 2000, handler: { type: 'sql', sql: CONFIRM_SQL } },
    },
    // A shard given back (release_lease.sql, hand_back.sql) is republished within a second whatever
    // this says, which is what the test watches for; long enough that a shard merely waiting its
    // turn behind concurrency 2 on a loaded box is not republished as if its message were lost.
    coordinator: { republishAfterMs: 20_000, minTickIntervalMs: 50 },
    worker: { leaseMs: 3000, blockMs: 200, concurrency: 2, ...(workerKinds ? { kinds: workerKinds } : {}) },
  });
}
const prefix = testKeyPrefix('kind-routing');

beforeAll(async () => {
  db = await createTestDatabase('kind-routing');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  await createOrdersSchema(pool);
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL };
  const migrated = await runCli(['migrate', '--config', config()], env);
  expect(migrated.code, migrated.stderr).toBe(0);
});

afterAll(async () => {
  await killAll();
  await pool?.end();
  await db?.drop();
});

describe('kinds with disjoint workers', () => {
  it('every shard is leased only by a worker that serves its kind, once', async () => {
    const unpaid = spawnCli('worker-unpaid', ['worker', '--config', config(['order.unpaid'])], { ...env, TIMEOUT_CENTER_CONFIG: undefined });
    const unconfirmed = spawnCli('worker-unconfirmed', ['worker', '--config', config(['order.unconfirmed'])], { ...env, TIMEOUT_CENTER_CONFIG: undefined });
    await Promise.all([unpaid, unconfirmed].map((w) => w.waitFor((l) => l.msg === 'worker started', 30_000)));
    const ids = {
      unpaid: String(unpaid.lines.find((l) => l.msg === 'worker started')!['workerId']),
      unconfirmed: String(unconfirmed.lines.find((l) => l.msg === 'worker started')!['workerId']),
    };
    const coordinator = spawnCli('coordinator', ['coordinator', '--config', config()], env);
    await coordinator.waitFor((l) => l.msg === 'became leader', 30_000);
    await pool.query(`INSERT INTO orders (id, status) SELECT g, CASE WHEN g <= 300 THEN 'unpaid' ELSE 'shipped' END FROM generate_series(1, 600) g`);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT CASE WHEN g <= 300 THEN 'order.unpaid' ELSE 'order.unconfirmed' END, g::text, now() + (g % 50) * interval '20 ms'
         FROM generate_series(1, 600) g`,
    );
    const inv = await waitForDrain(pool, 30_000);
    expect(inv).toMatchObject({ lost: 0, doubled: 0, wrong: 0 });
    const { rows } = await pool.query<{ kind: string; owner: string; shards: number; republished: number; max_attempts: number }>(
      `SELECT kind, owner, count(*)::int AS shards, count(*) FILTER (WHERE publish_count > 1)::int AS republished, max(attempts)::int AS max_attempts
         FROM timeout_center.shards GROUP BY kind, owner ORDER BY kind, owner`,
    );
    expect(rows).toEqual([
      { kind: 'order.unconfirmed', owner: ids.unconfirmed, shards: expect.any(Number), republished: 0, max_attempts: 1 },
      { kind: 'order.unpaid', owner: ids.unpaid, shards: expect.any(Number), republished: 0, max_attempts: 1 },
    ]);
    const { rows: orders } = await pool.query(`SELECT status, count(*)::int AS n FROM orders GROUP BY status ORDER BY status`);
    expect(orders).toEqual([
      { status: 'closed', n: 300 },
      { status: 'confirmed', n: 300 },
    ]);
  }, 90_000);
});
