// The console across stores (issue 27): a config whose kind order.unpaid is stored beside its
// orders in two business databases (orders_a: even ids, orders_b: odd ids, each migrated as a
// store), and one more store, orders_down, whose URL points at a closed port. A `run` process
// (coordinator + worker + its --console, two stores) drains the orders, a few of them poisoned,
// and a `console` process reads the three-store config. Through the JSON API: the overview,
// scans and failed lists name the store of each row and show orders_down as unreachable (still
// 200); a retry in a store and a cancel routed to a store act there, their audit rows copied to
// the center's audit_log with the store; one browser check of the pages.
import net from 'node:net';
import pg from 'pg';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { requireTools, toolCommand } from '../helpers/system-tools.js';
import { tearDown } from '../helpers/teardown.js';

const browserTool = requireTools('chromium');
const KIND = 'order.unpaid';
const ORDERS = 40; // 10, 15 and 21 are poison: 10 fails in orders_a, 15 and 21 in orders_b

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

interface StoreState {
  store: string;
  reachable: boolean;
  error?: string;
}

describe('console across stores', () => {
  let center: TestDatabase;
  let storeDbs: TestDatabase[];
  let centerPool: pg.Pool;
  let a: pg.Pool;
  let b: pg.Pool;
  let runner: CliProcess;
  let consoleProc: CliProcess;
  let runUrl: string;
  let url: string;

  const get = async <T>(path: string, base = url): Promise<T> => {
    const res = await fetch(`${base}${path}`);
    expect(res.status, `${path}: ${await res.clone().text()}`).toBe(200);
    return (await res.json()) as T;
  };
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };
  const stateOf = async (p: pg.Pool, bizId: string) =>
    (await p.query<{ state: string }>(`SELECT state FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id = $2 ORDER BY id DESC LIMIT 1`, [KIND, bizId]))
      .rows[0]?.state;

  beforeAll(async () => {
    center = await createTestDatabase('console-stores');
    storeDbs = await Promise.all([createTestDatabase('console-store-a', { empty: true }), createTestDatabase('console-store-b', { empty: true })]);
    centerPool = new pg.Pool({ connectionString: center.url, max: 2 });
    a = new pg.Pool({ connectionString: storeDbs[0]!.url, max: 2 });
    b = new pg.Pool({ connectionString: storeDbs[1]!.url, max: 2 });
    await Promise.all([createOrdersSchema(a), createOrdersSchema(b)]);
    const closedPort = await freePort();
    const base = {
      redisKeyPrefix: testKeyPrefix('console-stores'),
      kinds: {
        [KIND]: {
          store: 'beside' as const,
          shardSize: 50,
          maxAttempts: 1,
          handler: { type: 'sql' as const, sql: CLOSE_SQL, route: { by: 'modulo' as const, databases: ['orders_a', 'orders_b'] } },
        },
      },
      businessDatabases: { orders_a: { url: storeDbs[0]!.url }, orders_b: { url: storeDbs[1]!.url } },
      coordinator: { lockTtlMs: 3000, minTickIntervalMs: 50 },
      worker: { concurrency: 2, leaseMs: 15_000 },
    };
    const runConfig = writeConfig(base);
    // The console's config: one more store, on a port nothing listens on.
    const consoleConfig = writeConfig({
      ...base,
      kinds: {
        ...base.kinds,
        'order.unrefunded': { store: 'beside' as const, handler: { type: 'sql' as const, sql: CLOSE_SQL, database: 'orders_down' } },
      },
      businessDatabases: { ...base.businessDatabases, orders_down: { url: `postgres://root@127.0.0.1:${closedPort}/nowhere` } },
    });
    const env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL };
    const migrated = await runCli(['migrate', '--config', runConfig], env, 60_000);
    expect(migrated.code, migrated.stderr).toBe(0);
    // Each order and its timeout in the order's own store (even ids: orders_a, odd: orders_b).
    for (const [i, p] of [a, b].entries()) {
      await p.query(
        `WITH o AS (INSERT INTO orders (id, status, poison) SELECT g, 'unpaid', g IN (10, 15, 21) FROM generate_series(1, $1::int) g WHERE g % 2 = $2 RETURNING id)
         INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $3, id::text, now() FROM o`,
        [ORDERS, i, KIND],
      );
    }
    // Order 1001 (orders_b) and 1002 (orders_a): pending for an hour, to cancel and reschedule.
    await b.query(`INSERT INTO orders (id, status) VALUES (1001, 'unpaid')`);
    await b.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '1001', now() + interval '1 hour')`, [KIND]);
    await a.query(`INSERT INTO orders (id, status) VALUES (1002, 'unpaid')`);
    await a.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '1002', now() + interval '1 hour')`, [KIND]);

    const [runPort, consolePort] = await Promise.all([freePort(), freePort()]);
    runner = spawnCli('run --console', ['run', '--config', runConfig, '--console', String(runPort)], env);
    consoleProc = spawnCli('console', ['console', '--config', consoleConfig, '--port', String(consolePort)], { DATABASE_URL: center.url });
    runUrl = `http://127.0.0.1:${runPort}`;
    url = `http://127.0.0.1:${consolePort}`;
    await Promise.all([runner.waitForMsg('console listening'), consoleProc.waitForMsg('console listening'), runner.waitForMsg('worker started')]);
    await until(
      'both stores to drain their due timeouts',
      async () => {
        const left = await Promise.all(
          [a, b].map(
            async (p) =>
              (
                await p.query<{ n: number }>(
                  `SELECT (SELECT count(*) FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'failed'))
                        + (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced') AS n`,
                )
              ).rows[0]!.n,
          ),
        );
        return left.every((n) => Number(n) === 0);
      },
      60_000,
    );
  });

  afterAll(async () => {
    await consoleProc?.stop();
    await runner?.stop();
    await Promise.all([a?.end(), b?.end()]);
    await Promise.all((storeDbs ?? []).map((d) => d.drop()));
    await tearDown({ pool: centerPool, db: center });
  });

  it('the overview has a Stores section: each store with its kinds and leader, the closed one UNREACHABLE', async () => {
    const o = await get<{ stores: (StoreState & { kinds: string[]; failed?: number; leader?: unknown })[] }>('/api/overview');
    const byName = new Map(o.stores.map((s) => [s.store, s]));
    expect([...byName.keys()]).toEqual(['orders_a', 'orders_b', 'orders_down']);
    expect(byName.get('orders_a')).toMatchObject({ reachable: true, kinds: [KIND], failed: 1 });
    expect(byName.get('orders_b')).toMatchObject({ reachable: true, kinds: [KIND], failed: 2 });
    expect(byName.get('orders_a')!.leader).toMatchObject({ epoch: expect.any(Number) as number });
    expect(byName.get('orders_down')).toMatchObject({ reachable: false, kinds: ['order.unrefunded'] });
    expect(byName.get('orders_down')!.error).toMatch(/ECONNREFUSED|connect/i);
    const html = await (await fetch(`${url}/`)).text();
    expect(html).toContain('id="stores"');
    expect(html).toMatch(/orders_down[\s\S]*UNREACHABLE/);
    // The run process's console has the stores of its config.
    const fromRun = await get<{ stores: StoreState[] }>('/api/overview', runUrl);
    expect(fromRun.stores.map((s) => [s.store, s.reachable])).toEqual([
      ['orders_a', true],
      ['orders_b', true],
    ]);
  });

  it('scans and failed list the rows of every store with its name; the closed store is unreachable, the page still 200', async () => {
    const scans = await get<{ stores: StoreState[]; scans: { store: string; scanId: number }[] }>('/api/scans');
    expect(new Set(scans.scans.map((s) => s.store))).toEqual(new Set(['orders_a', 'orders_b']));
    expect(scans.stores.find((s) => s.store === 'orders_down')).toMatchObject({ reachable: false });
    expect(scans.stores.find((s) => s.store === 'orders_a')).toMatchObject({ reachable: true });
    // A scan page addresses its store: scan ids are per store.
    const one = scans.scans.find((s) => s.store === 'orders_b')!;
    const scan = await get<{ store: string; scan: { scanId: number }; shards: unknown[] }>(`/api/scans/orders_b/${one.scanId}`);
    expect(scan.store).toBe('orders_b');
    expect(scan.shards.length).toBeGreaterThan(0);
    const down = await fetch(`${url}/scans/orders_down/1`);
    expect(down.status).toBe(503);
    expect(await down.text()).toContain('orders_down');

    const failed = await get<{ total: number; stores: StoreState[]; rows: { store: string; bizId: string }[] }>('/api/failed');
    expect(failed.total).toBe(3);
    expect(failed.rows.map((r) => `${r.store}:${r.bizId}`).sort()).toEqual(['orders_a:10', 'orders_b:15', 'orders_b:21']);
    expect(failed.stores.find((s) => s.store === 'orders_down')).toMatchObject({ reachable: false });
    const page = await fetch(`${url}/failed`);
    expect(page.status).toBe(200);
    const text = await page.text();
    expect(text).toMatch(/store <strong>orders_down<\/strong> UNREACHABLE/);
    expect(text).toContain('<td class="store">orders_a</td>');

    // A timeout lookup goes to the store the kind's rule picks.
    const found = await get<{ store: string; rows: { bizId: string; state: string }[] }>(`/api/timeouts?kind=${KIND}&bizId=15`);
    expect(found.store).toBe('orders_b');
    expect(found.rows[0]).toMatchObject({ bizId: '15', state: 'failed' });
  });

  it('retries a failed timeout in a store; its audit row reaches the center with the store; retry all of a kind acts in each of its stores', async () => {
    await b.query(`UPDATE orders SET poison = false WHERE id IN (15, 21)`);
    await a.query(`UPDATE orders SET poison = false WHERE id = 10`);
    const id15 = (await b.query<{ id: string }>(`SELECT id FROM timeout_center.all_timeouts WHERE biz_id = '15' AND state = 'failed'`)).rows[0]!.id;
    // As the failed page's checkboxes send it: the store, then the id (ids are per store).
    const retried = await post('/api/failed/retry', { id: [`orders_b:${id15}`] });
    expect(retried.status, JSON.stringify(retried.json)).toBe(200);
    expect(retried.json).toMatchObject({ retried: 1 });
    await until('order 15 closed in orders_b', async () => (await stateOf(b, '15')) === 'done');
    const audit = await centerPool.query(`SELECT action, kind, store, target FROM timeout_center.audit_log WHERE action = 'retry' ORDER BY id`);
    expect(audit.rows).toEqual([{ action: 'retry', kind: null, store: 'orders_b', target: `ids ${id15}` }]);

    // The kind of the closed store: nothing can be done there, and the console says so.
    const refused = await post('/api/failed/retry', { kind: 'order.unrefunded' });
    expect(refused.status).toBe(503);
    expect(String(refused.json['error'])).toMatch(/orders_down.*UNREACHABLE/);

    // Every failed timeout of the kind, in each of its stores.
    const all = await post('/api/failed/retry', { kind: KIND });
    expect(all.status, JSON.stringify(all.json)).toBe(200);
    expect(all.json['stores']).toEqual([
      expect.objectContaining({ store: 'orders_a', retried: 1 }),
      expect.objectContaining({ store: 'orders_b', retried: 1 }),
    ]);
    await until('orders 10 and 21 closed', async () => (await stateOf(a, '10')) === 'done' && (await stateOf(b, '21')) === 'done');
    const stores = await centerPool.query(`SELECT store FROM timeout_center.audit_log WHERE action = 'retry' ORDER BY store`);
    expect(stores.rows.map((r: { store: string }) => r.store)).toEqual(['orders_a', 'orders_b', 'orders_b']);
  });

  it("reruns a shard in its store from the store's scan page, audited in the center with the store", async () => {
    // Order 1004 (orders_a) refuses to close once.
    await a.query(`INSERT INTO orders (id, status, poison) VALUES (1004, 'unpaid', true)`);
    await a.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '1004', now())`, [KIND]);
    const failed = await until(
      'order 1004 failed in a finished shard',
      async () =>
        (
          await a.query<{ shard_id: string; scan_id: string }>(
            `SELECT t.shard_id, sh.scan_id FROM timeout_center.all_timeouts t JOIN timeout_center.shards sh ON sh.id = t.shard_id
              WHERE t.biz_id = '1004' AND t.state = 'failed' AND sh.state IN ('done', 'failed')`,
          )
        ).rows[0],
    );
    await a.query(`UPDATE orders SET poison = false WHERE id = 1004`);
    const scan = await get<{ shards: { shardId: string; failedNow: number }[] }>(`/api/scans/orders_a/${failed.scan_id}`);
    expect(scan.shards.find((s) => String(s.shardId) === failed.shard_id)?.failedNow).toBe(1);
    const html = await (await fetch(`${url}/scans/orders_a/${failed.scan_id}`)).text();
    expect(html).toMatch(new RegExp(`/actions/shards/${failed.shard_id}/rerun[\\s\\S]*name="store" value="orders_a"`));
    const rerun = await post(`/api/shards/${failed.shard_id}/rerun`, { store: 'orders_a' });
    expect(rerun.status, JSON.stringify(rerun.json)).toBe(200);
    expect(rerun.json).toMatchObject({ store: 'orders_a', retried: 1 });
    await until('order 1004 closed', async () => (await stateOf(a, '1004')) === 'done');
    const audit = await centerPool.query(`SELECT store, target FROM timeout_center.audit_log WHERE action = 'rerun_shard'`);
    expect(audit.rows).toEqual([{ store: 'orders_a', target: `shard ${failed.shard_id}` }]);
  });

  it('cancel and reschedule of an order go to its store, audited in the center with the store', async () => {
    const due = new Date(Date.now() + 2 * 3_600_000);
    due.setMilliseconds(0);
    const moved = await post('/api/timeouts/reschedule', { kind: KIND, bizId: '1002', dueAt: due.toISOString() });
    expect(moved.status, JSON.stringify(moved.json)).toBe(200);
    expect((await a.query(`SELECT due_at FROM timeout_center.timeouts WHERE biz_id = '1002'`)).rows[0].due_at).toEqual(due);
    const cancelled = await post('/api/timeouts/cancel', { kind: KIND, bizId: '1001' });
    expect(cancelled.status, JSON.stringify(cancelled.json)).toBe(200);
    expect(cancelled.json).toMatchObject({ store: 'orders_b', cancelled: true });
    expect(await stateOf(b, '1001')).toBe('cancelled');
    const audit = await centerPool.query(
      `SELECT action, kind, target, store FROM timeout_center.audit_log WHERE action IN ('cancel', 'reschedule') ORDER BY id`,
    );
    expect(audit.rows).toEqual([
      { action: 'reschedule', kind: KIND, target: '1002', store: 'orders_a' },
      { action: 'cancel', kind: KIND, target: '1001', store: 'orders_b' },
    ]);
    const entries = await get<{ action: string; store: string | null }[]>('/api/audit');
    expect(entries.find((e) => e.action === 'cancel')?.store).toBe('orders_b');
  });

  describe.skipIf(browserTool.skip)(browserTool.title('in a browser'), () => {
    let browser: Browser;
    afterAll(async () => browser?.close());

    it('the failed and overview pages name the stores and show the closed one as unreachable', async () => {
      browser = await chromium.launch({ executablePath: toolCommand('chromium')[0], args: ['--no-sandbox', '--disable-dev-shm-usage'] });
      const page = await browser.newPage();
      await page.goto(`${url}/`);
      expect(await page.locator('#stores tr[data-store="orders_down"]').textContent()).toContain('UNREACHABLE');
      expect(await page.locator('#stores tr[data-store="orders_a"]').textContent()).toContain(KIND);
      await page.goto(`${url}/scans`);
      expect(await page.locator('#scans th').first().textContent()).toBe('store');
      expect(await page.locator('#scans td.store', { hasText: 'orders_b' }).count()).toBeGreaterThan(0);
      expect(await page.locator('.unreachable').textContent()).toContain('orders_down');
      await page.goto(`${url}/audit`);
      expect(await page.locator('#audit tr[data-action="cancel"] td.store').textContent()).toBe('orders_b');
    });
  });
});
