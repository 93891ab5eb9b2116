// Scheduling from a service whose orders live in another database (README, section 3b): schedule
// first in the center's database, then commit the order in its own. An order that commits is
// closed once; one whose transaction rolled back leaves a timeout that is skipped, not failed.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { migrate } from '../../src/db/migrate.js';
import { createLogger } from '../../src/observability/logger.js';
import { startRuntime, type Runtime } from '../../src/runtime.js';
import { schedule } from '../../src/schedule.js';
import { prepareBusinessDatabases } from '../../src/worker/business-db.js';
import { CLOSE_SQL, createOrdersSchema } from '../helpers/orders.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

let center: TestDatabase;
let orders: TestDatabase;
let centerPool: pg.Pool;
let ordersDb: pg.Pool;
let runtime: Runtime | undefined;

beforeAll(async () => {
  center = await createTestDatabase('elsewhere-center');
  orders = await createTestDatabase('elsewhere-orders');
  centerPool = new pg.Pool({ connectionString: center.url, max: 3 });
  ordersDb = new pg.Pool({ connectionString: orders.url, max: 3 });
  await createOrdersSchema(ordersDb);
  const logger = createLogger('silent');
  await migrate(centerPool, logger);
  expect((await prepareBusinessDatabases({ orders: orders.url }, logger)).prepared).toEqual(['orders']);
  const config = loadConfig({
    object: {
      redisKeyPrefix: testKeyPrefix('elsewhere'),
      businessDatabases: { orders: { url: orders.url } },
      kinds: {
        'order.unpaid': { shardSize: 100, handler: { type: 'sql', sql: CLOSE_SQL, database: 'orders' } },
        'order.ranged': {
          shardSize: 100,
          handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'range', ranges: [{ from: 0, to: 100, database: 'orders' }] } },
        },
      },
      coordinator: { minTickIntervalMs: 50 },
      worker: { blockMs: 100, concurrency: 2 },
      logLevel: 'silent',
    },
    env: { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL },
  });
  runtime = await startRuntime({ config, logger, coordinator: true, worker: true });
});

afterAll(async () => {
  await runtime?.stop();
  await ordersDb?.end();
  await orders?.drop();
  await tearDown({ pool: centerPool, db: center });
});

/** The README's snippet, as a function: schedule first, then the order; commit or not. */
async function placeOrder(orderId: number, commit: boolean): Promise<void> {
  await schedule(centerPool, { kind: 'order.unpaid', bizId: orderId, delayMs: 300 }); // 1. schedule first
  const client = await ordersDb.connect();
  try {
    await client.query('BEGIN');
    await client.query("INSERT INTO orders (id, status) VALUES ($1, 'unpaid')", [orderId]); // 2. then the order
    if (!commit) throw new Error('the service failed before its commit');
    await client.query('COMMIT');
  } catch {
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
}

describe('scheduling from a service whose orders live elsewhere', () => {
  it('closes the committed orders once and skips the timeout of an order that never committed', async () => {
    for (let id = 1; id <= 20; id += 1) await placeOrder(id, id !== 7);
    const deadline = Date.now() + 30_000;
    let states: Record<string, number> = {};
    while (Date.now() < deadline) {
      const { rows } = await centerPool.query<{ s: string; n: number }>(
        `SELECT state || '/' || coalesce(result, '-') AS s, count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' GROUP BY 1`,
      );
      states = Object.fromEntries(rows.map((r) => [r.s, r.n]));
      if ((states['done/applied'] ?? 0) + (states['done/skipped'] ?? 0) === 20) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(states).toEqual({ 'done/applied': 19, 'done/skipped': 1 });
    const { rows } = await centerPool.query(`SELECT result FROM timeout_center.all_timeouts WHERE biz_id = '7'`);
    expect(rows[0].result).toBe('skipped');
    const closed = await ordersDb.query<{ n: number }>(`SELECT count(*)::int AS n FROM order_transitions WHERE to_status = 'closed'`);
    expect(closed.rows[0]!.n).toBe(19);
    const markers = await ordersDb.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.markers`);
    expect(markers.rows[0]!.n).toBe(0);
  });

  it('fails at once, saying why, a timeout whose biz_id the routing rule cannot place', async () => {
    await ordersDb.query(`INSERT INTO orders (id, status) VALUES (50, 'unpaid')`);
    for (const bizId of ['50', '500', 'abc']) await schedule(centerPool, { kind: 'order.ranged', bizId, delayMs: 0 });
    const deadline = Date.now() + 30_000;
    let rows: { biz_id: string; state: string; result: string | null; last_error: string | null }[] = [];
    while (Date.now() < deadline) {
      ({ rows } = await centerPool.query(
        `SELECT biz_id, state, result, last_error FROM timeout_center.all_timeouts WHERE kind = 'order.ranged' ORDER BY biz_id`,
      ));
      if (rows.every((r) => r.state === 'done' || r.state === 'failed')) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(rows.map((r) => [r.biz_id, r.state, r.result])).toEqual([
      ['50', 'done', 'applied'],
      ['500', 'failed', null],
      ['abc', 'failed', null],
    ]);
    expect(rows[1]!.last_error).toMatch(/cannot be placed by the routing rule of order\.ranged/);
  });
});
