// The console over plain HTTP (no browser; test/console/console.test.ts drives one), on its
// Fastify server: a real `timeout-center console --base-path /tc` process with basic auth, on a
// real database. Probes without auth, 401 with the challenge, pages and their JSON with the
// security headers (with and without the base path), a JSON action and a form action (CSRF
// refused without the page's token, a 303 back with it), another site's Origin refused, and the
// answers to a wrong method, a body over the limit, a non-JSON API post and an unknown page.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const AUTH = `Basic ${Buffer.from('alice:console-http-password').toString('base64')}`;

describe('console over HTTP (Fastify)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let consoleProc: CliProcess;
  let origin: string;

  beforeAll(async () => {
    db = await createTestDatabase('console_http');
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    await createOrdersSchema(pool);
    const configPath = writeConfig({ redisKeyPrefix: testKeyPrefix('console_http'), kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    expect((await runCli(['migrate', '-c', configPath], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL })).code).toBe(0);
    const port = await freePort();
    consoleProc = spawnCli('console', ['console', '--port', String(port), '--base-path', '/tc'], {
      DATABASE_URL: db.url,
      TC_CONSOLE_USER: 'alice',
      TC_CONSOLE_PASSWORD: 'console-http-password',
    });
    await consoleProc.waitForMsg('console listening', 60_000);
    origin = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await consoleProc?.stop();
    const leaked = await killAll();
    await tearDown({ pool, db });
    expect(leaked).toEqual([]);
  });

  const get = (path: string, headers: Record<string, string> = { authorization: AUTH }) => fetch(`${origin}${path}`, { headers, redirect: 'manual' });
  const post = (path: string, body: string, type: string, headers: Record<string, string> = {}) =>
    fetch(`${origin}${path}`, { method: 'POST', headers: { authorization: AUTH, 'content-type': type, ...headers }, body, redirect: 'manual' });

  it('probes answer without auth; everything else asks for it', async () => {
    expect(await (await get('/healthz', {})).text()).toBe('ok\n');
    expect(await (await get('/tc/readyz', {})).text()).toBe('ready\n');
    const refused = await get('/tc/', {});
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toContain('Basic realm="timeout-center console"');
    const api = await get('/tc/api/kinds', { authorization: 'Basic bm9ib2R5Onh4eHh4eHh4' });
    expect(api.status).toBe(401);
    expect(await api.json()).toEqual({ error: 'wrong user or password' });
  });

  it('serves pages and their JSON with the security headers, with and without the base path', async () => {
    const page = await get('/tc/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(page.headers.get('cache-control')).toBe('no-store');
    expect(await page.text()).toContain('href="/tc/kinds"');
    for (const path of ['/tc/api/kinds', '/api/kinds']) {
      const res = await get(path);
      expect(res.status, path).toBe(200);
      expect(JSON.stringify(await res.json())).toContain('order.unpaid');
    }
    expect((await get('/tc/kinds')).status).toBe(200);
    expect((await get('/tc/nope')).status).toBe(404);
    expect((await fetch(`${origin}/tc/kinds`, { method: 'HEAD', headers: { authorization: AUTH } })).status).toBe(200);
  });

  it('acts by JSON and by form (CSRF checked), refuses another site, a wrong method, a body over the limit and a non-JSON API post', async () => {
    const paused = await post('/tc/api/kinds/order.unpaid/pause', '{}', 'application/json');
    expect(paused.status).toBe(200);
    expect((await pool.query("SELECT paused FROM timeout_center.kinds WHERE kind = 'order.unpaid'")).rows).toEqual([{ paused: true }]);
    // A form post without the page's token is refused; with it, a 303 back to the page.
    const noToken = await post('/tc/actions/kinds/order.unpaid/resume', 'back=/kinds', 'application/x-www-form-urlencoded');
    expect(noToken.status).toBe(403);
    const html = await (await get('/tc/kinds')).text();
    const token = /name="_csrf" value="([^"]+)"/.exec(html)?.[1];
    expect(token).toBeDefined();
    const resumed = await post('/tc/actions/kinds/order.unpaid/resume', `_csrf=${encodeURIComponent(token!)}&back=/kinds`, 'application/x-www-form-urlencoded');
    expect(resumed.status).toBe(303);
    expect(resumed.headers.get('location')).toMatch(/^\/tc\/kinds\?done=/);
    expect((await pool.query("SELECT paused FROM timeout_center.kinds WHERE kind = 'order.unpaid'")).rows).toEqual([{ paused: false }]);
    const flash = await (await get(resumed.headers.get('location')!)).text();
    expect(flash).toMatch(/resumed/i);
    // Another site's page cannot post here.
    expect((await post('/tc/api/kinds/order.unpaid/pause', '{}', 'application/json', { origin: 'http://evil.example' })).status).toBe(403);
    expect((await fetch(`${origin}/tc/api/kinds`, { method: 'PUT', headers: { authorization: AUTH } })).status).toBe(405);
    expect((await post('/tc/api/kinds/order.unpaid/pause', JSON.stringify({ x: 'y'.repeat(300 * 1024) }), 'application/json')).status).toBe(413);
    // Far over it, Fastify answers before it reads and closes the connection; closed at once, the
    // unread bytes reset it and the client lost the answer (fetch failed, EPIPE): 2 of 10 tries here,
    // 14 of 30 with the console's auth off.
    const far = JSON.stringify({ x: 'y'.repeat(16 * 1024 * 1024) });
    const answers: Record<string, number> = {};
    for (let i = 0; i < 20; i++) {
      const what = await post('/tc/api/kinds/order.unpaid/pause', far, 'application/json').then(
        (res) => String(res.status),
        (err: Error & { cause?: { code?: string } }) => `failed: ${err.cause?.code ?? err.message}`,
      );
      answers[what] = (answers[what] ?? 0) + 1;
    }
    expect(answers).toEqual({ '413': 20 });
    const notJson = await post('/tc/api/kinds/order.unpaid/pause', 'x=1', 'application/x-www-form-urlencoded');
    expect(notJson.status).toBe(415);
    expect((await pool.query("SELECT paused FROM timeout_center.kinds WHERE kind = 'order.unpaid'")).rows).toEqual([{ paused: false }]);
  });
});
