// A flood due at one instant is counted before that instant (count_ahead.sql), and its shards are
// written and leased before it too (planAhead, shards.not_before: sql/0011), their claims waiting
// for the instant: every due row covered by that first scan, none closed before it was due, none
// closed twice, none left behind, including a row inserted after the count and one due within the
// instant's millisecond.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { checkInvariants, CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const N = 30_000;
let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string>;
let runner: CliProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase('count_ahead');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  await createOrdersSchema(pool);
  const config = writeConfig({
    redisKeyPrefix: testKeyPrefix('count_ahead'),
    logLevel: 'debug',
    kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } },
  });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config };
  expect((await runCli(['migrate'], env)).code).toBe(0);
});

afterAll(async () => {
  await runner?.stop();
  await tearDown({ pool, db });
});

it('counts and plans a flood before its due instant, and claims it at the instant', async () => {
  runner = spawnCli('run', ['run'], env);
  await runner.waitForMsg('became leader', 20_000);
  const dueAt = new Date(Date.now() + 3000);
  await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, $1::int + 2) g`, [N]);
  await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, $2 FROM generate_series(1, $1::int) g`, [
    N,
    dueAt,
  ]);
  // Due 0.3 ms after the instant: next_due reaches the coordinator in whole milliseconds, and
  // this row belongs to the same count.
  await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', $1, $2::timestamptz + interval '300 microseconds')`, [
    String(N + 1),
    dueAt,
  ]);

  const counted = await runner.waitForMsg('counted ahead of the due instant', 10_000);
  expect(new Date(String(counted['time'])).getTime()).toBeLessThan(dueAt.getTime());
  expect(counted['kinds']).toEqual({ 'order.unpaid': { uncovered: N + 1, complete: true } });
  // Inserted after the count, due at the same instant: the credit does not know it, and it must
  // close all the same.
  await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', $1, $2)`, [String(N + 2), dueAt]);

  const deadline = Date.now() + 30_000;
  let closed = 0;
  while (Date.now() < deadline) {
    closed = (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE status = 'closed'`)).rows[0]!.n;
    if (closed === N + 2) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(closed).toBe(N + 2);

  // The first scan, mapped before the instant, covers every row the count saw; its shards were
  // leased before the instant and wait for it (database clock).
  const ahead = runner.lines.filter((l) => l.msg === 'scan mapped ahead of its due instant');
  expect(ahead).toHaveLength(1);
  expect(ahead[0]!['capacity']).toBe(N + 1);
  expect(new Date(String(ahead[0]!['time'])).getTime()).toBeLessThan(dueAt.getTime());
  const { rows: first } = await pool.query<{ claimed: number; not_before_ok: boolean; leased_early: number }>(
    `SELECT sum(size)::int AS claimed, bool_and(not_before = $2::timestamptz + interval '1 millisecond') AS not_before_ok,
            count(*) FILTER (WHERE started_at < $2)::int AS leased_early
       FROM timeout_center.shards WHERE scan_id = $1`,
    [ahead[0]!['scanId'], dueAt],
  );
  expect(first[0]!.not_before_ok).toBe(true);
  expect(first[0]!.leased_early).toBeGreaterThan(0);
  // A shard leased early waited for the instant: the scan's shards claimed all they were planned
  // for (an early claim finds nothing due and claims nothing).
  expect(first[0]!.claimed).toBe(N + 1);
  // No row closed before it was due: each done row's claim ran at or after the instant.
  const { rows: early } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.done_timeouts WHERE finished_at < due_at`);
  expect(early[0]!.n).toBe(0);
  const { rows } = await pool.query<{ not_done: number; done: number }>(
    `SELECT (SELECT count(*) FROM timeout_center.shards WHERE state <> 'done')::int AS not_done,
            (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'done')::int AS done`,
  );
  expect(rows[0]).toEqual({ not_done: 0, done: N + 2 });
  const inv = await checkInvariants(pool);
  expect({ lost: inv.lost, doubled: inv.doubled, wrong: inv.wrong }).toEqual({ lost: 0, doubled: 0, wrong: 0 });
});
