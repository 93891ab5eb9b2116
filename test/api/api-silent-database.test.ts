// The standalone API when its connections to the center's database go silent (no reply, no
// close: a dropped firewall or NAT entry, a host gone without a reset), through a proxy that
// stops forwarding on the connections open at that moment. A request on a silent connection is
// answered with an error within the silence bound (databaseSilenceMs), the connection is dropped,
// and the next request is served on a new one: the API never ends up with a pool of dead
// connections.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/api/tokens.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';
import { silentProxyTo, type SilentProxy } from '../helpers/silent-proxy.js';
import { tearDown } from '../helpers/teardown.js';

const TOKEN = 'silent-token-0123456789abcdef';
const SILENCE_MS = 2000;

describe('HTTP API over a silent database connection', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let proxy: SilentProxy;
  let api: CliProcess;
  let base: string;

  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  };

  beforeAll(async () => {
    db = await createTestDatabase('api-silent');
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    await createOrdersSchema(pool);
    const configPath = writeConfig({
      logLevel: 'debug',
      databaseSilenceMs: SILENCE_MS,
      kinds: { 'order.unpaid': { timeLimitMs: 1000, handler: { type: 'sql' as const, sql: CLOSE_SQL } } },
      api: { tokens: [{ name: 'orders', sha256: sha256Hex(TOKEN), kinds: ['*'], verbs: ['*'] }], requestTimeoutMs: 10_000 },
    });
    expect((await runCli(['migrate', '-c', configPath], { DATABASE_URL: db.url })).code).toBe(0);
    const via = await silentProxyTo(db.url);
    proxy = via.proxy;
    const port = await freePort();
    api = spawnCli('api', ['api', '-c', configPath, '--port', String(port)], { DATABASE_URL: via.url, REDIS_URL: '' });
    await api.waitForMsg('api listening', 60_000);
    base = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await api?.stop();
    await proxy?.close();
    const leaked = await killAll();
    await tearDown({ pool, db });
    expect(leaked).toEqual([]);
  });

  it('a request on a silent connection fails within the bound; the next ones are served on new connections', async () => {
    // Open a few connections (requests at once), then silence them all.
    const warm = await Promise.all([1, 2, 3, 4].map((i) => call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: `w${i}`, delayMs: 3_600_000 })));
    expect(warm.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(proxy.silence()).toBeGreaterThanOrEqual(1);

    const started = Date.now();
    const during = await Promise.all([1, 2, 3, 4].map((i) => call('GET', `/v1/timeouts/order.unpaid/w${i}`)));
    const answeredMs = Date.now() - started;
    // Requests that met a silent connection were answered with an error, none later than the
    // silence bound plus a margin; a request may have got a new connection and succeeded.
    expect(answeredMs).toBeLessThan(SILENCE_MS + 3000);
    for (const r of during) expect([200, 503]).toContain(r.status);
    expect(during.some((r) => r.status === 503)).toBe(true);

    // The silent connections are gone: every request now is served.
    const after = await Promise.all([1, 2, 3, 4].map((i) => call('GET', `/v1/timeouts/order.unpaid/w${i}`)));
    expect(after.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    const created = await call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'after', delayMs: 3_600_000 });
    expect(created.status).toBe(200);
    expect(JSON.stringify(api.lines)).toContain(`PostgreSQL sent nothing for ${SILENCE_MS} ms`);
  });
});
