// A short timeout inserted after a long one fires first: the claim walks due order, not insert
// order, so nothing queues behind a far deadline.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { schedule } from '../../src/schedule.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string>;

beforeAll(async () => {
  db = await createTestDatabase('hol');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  await createOrdersSchema(pool);
  const config = writeConfig({
    redisKeyPrefix: testKeyPrefix('hol'),
    kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } },
  });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config };
  expect((await runCli(['migrate'], env)).code).toBe(0);
});

afterAll(() => tearDown({ pool, db }));

it('fires a short timeout inserted after a long one first', async () => {
  await pool.query("INSERT INTO orders (id, status) VALUES (1, 'unpaid'), (2, 'unpaid')");
  const runner = spawnCli('run', ['run'], env);
  await runner.waitForMsg('became leader', 20_000);
  const long = await schedule(pool, { kind: 'order.unpaid', bizId: 1, delayMs: 4000 });
  const short = await schedule(pool, { kind: 'order.unpaid', bizId: 2, delayMs: 300 });
  expect(long.id).toBeLessThan(short.id);

  const deadline = Date.now() + 15_000;
  let rows: { biz_id: string; finished_at: Date | null; late_ms: number | null }[] = [];
  while (Date.now() < deadline) {
    ({ rows } = await pool.query(
      `SELECT biz_id, finished_at, extract(epoch FROM finished_at - due_at) * 1000 AS late_ms
         FROM timeout_center.all_timeouts ORDER BY id`,
    ));
    if (rows.every((r) => r.finished_at)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const [l, s] = rows;
  expect(l!.finished_at && s!.finished_at).toBeTruthy();
  expect(s!.finished_at!.getTime()).toBeLessThan(l!.finished_at!.getTime());
  // The short one did not wait for the long one to come due.
  expect(s!.finished_at!.getTime()).toBeLessThan(long.dueAt.getTime());
  expect((await runner.stop()).code).toBe(0);
});
