// The HTTP API with a kind stored beside its orders (store: beside, route by modulo over two
// stores): each call goes to the store the rule picks for the biz_id, as StoreRouter does. A real
// `timeout-center api` process over a center database and two store databases.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.beside';

describe('HTTP API routes each call to its store', () => {
  let center: TestDatabase;
  let stores: TestDatabase[];
  let centerPool: pg.Pool;
  let pools: pg.Pool[];
  let api: CliProcess;
  let base: string;

  beforeAll(async () => {
    center = await createTestDatabase('api_center');
    stores = await Promise.all(['a', 'b'].map((s) => createTestDatabase(`api_store_${s}`, { empty: true })));
    centerPool = new pg.Pool({ connectionString: center.url, max: 2 });
    pools = stores.map((s) => new pg.Pool({ connectionString: s.url, max: 2 }));
    await Promise.all(pools.map((p) => createOrdersSchema(p)));
    const configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix('api_stores'),
      kinds: {
        [KIND]: { store: 'beside', handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: ['store_a', 'store_b'] } } },
        'order.center': { handler: { type: 'sql', sql: CLOSE_SQL } },
      },
      businessDatabases: { store_a: { url: stores[0]!.url }, store_b: { url: stores[1]!.url } },
    });
    const env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL };
    const migrated = await runCli(['migrate', '-c', configPath], env, 60_000);
    expect(migrated.code, migrated.stderr).toBe(0);
    const port = await freePort();
    api = spawnCli('api', ['api', '-c', configPath, '--port', String(port)], { DATABASE_URL: center.url });
    await api.waitForMsg('api listening', 60_000);
    base = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await api?.stop();
    const leaked = await killAll();
    await Promise.all([centerPool, ...(pools ?? [])].map((p) => p?.end()));
    await Promise.all([center, ...(stores ?? [])].map((d) => d?.drop()));
    expect(leaked).toEqual([]);
  });

  async function call(method: string, path: string, body?: unknown) {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> & { error?: { code: string; field?: string } } };
  }
  const where = async (bizId: string) => {
    const counts = await Promise.all(
      [centerPool, ...pools].map(
        async (p) => (await p.query<{ n: number }>('SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE biz_id = $1', [bizId])).rows[0]!.n,
      ),
    );
    return { center: counts[0], store_a: counts[1], store_b: counts[2] };
  };

  it('schedules, reads, reschedules and cancels in the store of each biz_id (2002 -> store_a, 2001 -> store_b)', async () => {
    expect((await call('POST', '/v1/timeouts', { kind: KIND, bizId: '2002', delayMs: 3_600_000 })).status).toBe(200);
    expect((await call('POST', '/v1/timeouts', { kind: KIND, bizId: '2001', delayMs: 3_600_000 })).status).toBe(200);
    expect(await where('2002')).toEqual({ center: 0, store_a: 1, store_b: 0 });
    expect(await where('2001')).toEqual({ center: 0, store_a: 0, store_b: 1 });
    expect((await call('GET', `/v1/timeouts/${KIND}/2001`)).body).toMatchObject({ state: 'pending', store: 'store_b' });
    expect((await call('GET', `/v1/timeouts/${KIND}/2002`)).body).toMatchObject({ state: 'pending', store: 'store_a' });
    expect((await call('POST', `/v1/timeouts/${KIND}/2001/reschedule`, { dueAt: '2099-01-01T00:00:00Z' })).body).toEqual({ rescheduled: true });
    expect((await call('POST', `/v1/timeouts/${KIND}/2001/cancel`)).body).toEqual({ cancelled: true });
    expect((await pools[1]!.query("SELECT state, due_at FROM timeout_center.timeouts WHERE biz_id = '2001'")).rows).toEqual([
      { state: 'cancelled', due_at: new Date('2099-01-01T00:00:00Z') },
    ]);
    // A center kind stays in the center.
    expect((await call('POST', '/v1/timeouts', { kind: 'order.center', bizId: '2003', delayMs: 3_600_000 })).status).toBe(200);
    expect(await where('2003')).toEqual({ center: 1, store_a: 0, store_b: 0 });
    expect((await call('GET', '/v1/timeouts/order.center/2003')).body).toMatchObject({ store: null });
  });

  it('a batch goes to its one store; a batch across stores is refused whole; an id the rule cannot place is unroutable', async () => {
    const even = [2010, 2012, 2014].map((id) => ({ kind: KIND, bizId: String(id), delayMs: 3_600_000 }));
    const ok = await call('POST', '/v1/timeouts/batch', { timeouts: even });
    expect(ok.body).toMatchObject({ count: 3, created: 3 });
    expect((await pools[0]!.query("SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE biz_id IN ('2010', '2012', '2014')")).rows[0]).toEqual({
      n: 3,
    });
    const mixed = await call('POST', '/v1/timeouts/batch', {
      timeouts: [
        { kind: KIND, bizId: '2020', delayMs: 1000 },
        { kind: KIND, bizId: '2021', delayMs: 1000 },
      ],
    });
    expect(mixed.status).toBe(400);
    expect(mixed.body.error).toMatchObject({ code: 'batch_spans_stores', field: 'timeouts' });
    const withCenter = await call('POST', '/v1/timeouts/batch', {
      timeouts: [
        { kind: KIND, bizId: '2022', delayMs: 1000 },
        { kind: 'order.center', bizId: '2022', delayMs: 1000 },
      ],
    });
    expect(withCenter.body.error).toMatchObject({ code: 'batch_spans_stores' });
    for (const id of ['2020', '2021', '2022']) expect(await where(id)).toEqual({ center: 0, store_a: 0, store_b: 0 });
    const unroutable = await call('POST', '/v1/timeouts', { kind: KIND, bizId: 'not-a-number', delayMs: 1000 });
    expect(unroutable.status).toBe(400);
    expect(unroutable.body.error).toMatchObject({ code: 'unroutable', field: 'bizId' });
    const inBatch = await call('POST', '/v1/timeouts/batch', {
      timeouts: [
        { kind: KIND, bizId: '2030', delayMs: 1 },
        { kind: KIND, bizId: 'x', delayMs: 1 },
      ],
    });
    expect(inBatch.body.error).toMatchObject({ code: 'unroutable', field: 'timeouts.1.bizId' });
    expect(await where('2030')).toEqual({ center: 0, store_a: 0, store_b: 0 });
  });

  it("settles in the biz_id's store; settle again answers already_final with its outcome, not_found only for an id never scheduled", async () => {
    await pools[1]!.query("INSERT INTO orders (id, status) VALUES (2041, 'unpaid')");
    expect((await call('POST', '/v1/timeouts', { kind: KIND, bizId: '2041', delayMs: 0 })).status).toBe(200);
    expect(await where('2041')).toEqual({ center: 0, store_a: 0, store_b: 1 });
    expect((await call('POST', `/v1/timeouts/${KIND}/2041/settle`)).body).toMatchObject({ outcome: 'applied', state: 'done', result: 'applied' });
    expect((await pools[1]!.query('SELECT status FROM orders WHERE id = 2041')).rows).toEqual([{ status: 'closed' }]);
    const again = await call('POST', `/v1/timeouts/${KIND}/2041/settle`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ outcome: 'already_final', state: 'done', result: 'applied' });
    // Cancelled in its store (2001, above): final too.
    expect((await call('POST', `/v1/timeouts/${KIND}/2001/settle`)).body).toMatchObject({ outcome: 'already_final', state: 'cancelled' });
    expect((await call('POST', `/v1/timeouts/${KIND}/2043/settle`)).body).toMatchObject({ outcome: 'not_found' });
  });
});
