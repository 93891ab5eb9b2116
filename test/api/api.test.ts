// The HTTP API against real processes: a `run --api` process (coordinator + worker + API) and a
// standalone `timeout-center api` (no Redis), on a real database and Redis. Every call, the
// token scopes (403 changes nothing), the bad-input answers (each with its code and field, within
// a bounded time, nothing written), a batch that fails in the database writes none of its rows,
// and no token ever reaches the logs.
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiClient } from '../../src/api/client.js';
import { sha256Hex } from '../../src/api/tokens.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const ORDERS_TOKEN = 'orders-token-0123456789abcdef';
const SHIP_TOKEN = 'shipping-token-0123456789abcdef';
const READER_TOKEN = 'reader-token-0123456789abcdef';
const TOKENS_ENV = JSON.stringify([
  { name: 'orders', token: ORDERS_TOKEN, kinds: ['order.unpaid', 'order.extra'], verbs: ['*'] },
  { name: 'shipping', token: SHIP_TOKEN, kinds: ['order.unshipped'], verbs: ['schedule', 'get'] },
]);
const REQUEST_TIMEOUT_MS = 1000;
const BODY_LIMIT = 1024 * 1024;

describe('HTTP API (run --api, and timeout-center api)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let runner: CliProcess;
  let standalone: CliProcess;
  let base: string;
  let standaloneBase: string;
  let configPath: string;

  const count = async (where = 'true', values: unknown[] = []) =>
    (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE ${where}`, values)).rows[0]!.n;

  async function call(method: string, path: string, body?: unknown, token: string | null = ORDERS_TOKEN, url = base) {
    const headers: Record<string, string> = {};
    if (token) headers['authorization'] = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const sent = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const res = await fetch(`${url}${path}`, { method, headers, body: sent });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown> & { error?: { code: string; field?: string } }) : {} };
  }

  function overLimit(method: string, target: string, headers: Record<string, string>, text: string) {
    return new Promise<{ status: number; headers: IncomingHttpHeaders; body: Record<string, unknown> & { error?: { code: string; field?: string } } }>(
      (resolve, reject) => {
        const req = httpRequest(target, { method, headers }, (res) => {
          let data = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (data += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data ? JSON.parse(data) : {} }));
          res.on('error', reject);
        });
        let answered = false;
        req.on('response', () => (answered = true));
        req.on('error', (err) => {
          if (!answered) reject(err);
        });
        req.end(text);
      },
    );
  }

  beforeAll(async () => {
    db = await createTestDatabase('api');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    const kinds = {
      'order.unpaid': { shardSize: 100, handler: { type: 'sql' as const, sql: CLOSE_SQL } },
      'order.unshipped': { handler: { type: 'sql' as const, sql: CLOSE_SQL } },
    };
    const api = {
      tokens: [{ name: 'reader', sha256: sha256Hex(READER_TOKEN), kinds: ['*'], verbs: ['get' as const] }],
      bodyLimitBytes: BODY_LIMIT,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    };
    configPath = writeConfig({ redisKeyPrefix: testKeyPrefix('api'), logLevel: 'debug', kinds, api });
    const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TC_API_TOKENS: TOKENS_ENV };
    expect((await runCli(['migrate', '-c', configPath], env)).code).toBe(0);
    const apiPort = await freePort();
    runner = spawnCli('run --api', ['run', '-c', configPath, '--api', String(apiPort)], env);
    await runner.waitForMsg('api listening', 60_000);
    base = `http://127.0.0.1:${apiPort}`;
    // The standalone API reads a config that declares one kind more than the database knows
    // (order.extra was never migrated): the database refuses it, as it would a stale config.
    const standaloneConfig = writeConfig({ logLevel: 'debug', kinds: { ...kinds, 'order.extra': kinds['order.unshipped'] }, api });
    const port2 = await freePort();
    standalone = spawnCli('api', ['api', '-c', standaloneConfig, '--port', String(port2)], { DATABASE_URL: db.url, REDIS_URL: '', TC_API_TOKENS: TOKENS_ENV });
    await standalone.waitForMsg('api listening', 60_000);
    standaloneBase = `http://127.0.0.1:${port2}`;
  });

  afterAll(async () => {
    if (process.env['API_TEST_DEBUG']) console.log(runner?.stderr, JSON.stringify(runner?.lines.slice(-8)));
    await runner?.stop();
    await standalone?.stop();
    const leaked = await killAll();
    await tearDown({ pool, db });
    expect(leaked).toEqual([]);
  });

  it('schedules one timeout, idempotent on kind + bizId as schedule() is, the delay on the database clock', async () => {
    await pool.query("INSERT INTO orders (id, status) VALUES (101, 'unpaid')");
    const before = (await pool.query<{ now: Date }>('SELECT now()')).rows[0]!.now.getTime();
    const first = await call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: '101', delayMs: 3_600_000, payload: { note: 'a' } });
    const after = (await pool.query<{ now: Date }>('SELECT now()')).rows[0]!.now.getTime();
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ kind: 'order.unpaid', bizId: '101', created: true });
    const due = Date.parse(first.body['dueAt'] as string);
    expect(due).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(due).toBeLessThanOrEqual(after + 3_600_000);
    // Again: the same live timeout moves (created false), as schedule() does.
    const again = await call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: '101', dueAt: '2099-01-01T00:00:00+02:00' });
    expect(again.body).toMatchObject({ id: first.body['id'], created: false, dueAt: '2098-12-31T22:00:00.000Z' });
    expect(await count("kind = 'order.unpaid' AND biz_id = '101'")).toBe(1);
    const got = await call('GET', '/v1/timeouts/order.unpaid/101');
    expect(got.body).toMatchObject({ state: 'pending', dueAt: '2098-12-31T22:00:00.000Z', attempts: 0, shardId: null, scanId: null, store: null });
  });

  it('gets state, outcome, attempts and the shard and scan that applied it; cancel and reschedule answer whether they acted', async () => {
    await pool.query("INSERT INTO orders (id, status) VALUES (201, 'unpaid'), (202, 'unpaid'), (203, 'unpaid')");
    expect((await call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: '201', delayMs: 0 })).status).toBe(200);
    let got: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 100; i += 1) {
      got = await call('GET', '/v1/timeouts/order.unpaid/201');
      if (got.body['state'] === 'done') break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(got!.body).toMatchObject({ state: 'done', outcome: 'applied', attempts: 1, lastError: null });
    const shard = await pool.query<{ id: string; scan_id: string }>('SELECT id, scan_id FROM timeout_center.shards WHERE id = $1', [got!.body['shardId']]);
    expect(got!.body['scanId']).toBe(Number(shard.rows[0]!.scan_id));
    // Settle after the scan applied it: already_final with its outcome and shard, not not_found.
    expect((await call('POST', '/v1/timeouts/order.unpaid/201/settle')).body).toMatchObject({
      outcome: 'already_final',
      state: 'done',
      result: 'applied',
      shardId: got!.body['shardId'],
      detail: expect.stringContaining(`applied by shard ${String(got!.body['shardId'])}`),
    });
    // Too late: the timeout is done.
    expect((await call('POST', '/v1/timeouts/order.unpaid/201/cancel')).body).toEqual({ cancelled: false });
    expect((await call('POST', '/v1/timeouts/order.unpaid/201/reschedule', { delayMs: 1000 })).body).toEqual({ rescheduled: false });
    // In time: pending, moved, then cancelled; a second cancel is too late.
    await call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: '202', delayMs: 3_600_000 });
    expect((await call('POST', '/v1/timeouts/order.unpaid/202/reschedule', { dueAt: '2098-01-01T00:00:00Z' })).body).toEqual({ rescheduled: true });
    expect((await call('POST', '/v1/timeouts/order.unpaid/202/cancel')).body).toEqual({ cancelled: true });
    expect((await call('POST', '/v1/timeouts/order.unpaid/202/cancel')).body).toEqual({ cancelled: false });
    expect((await call('GET', '/v1/timeouts/order.unpaid/202')).body).toMatchObject({ state: 'cancelled', dueAt: '2098-01-01T00:00:00.000Z' });
    expect((await call('GET', '/v1/timeouts/order.unpaid/999999')).body.error).toMatchObject({ code: 'not_found' });
    // Settle on read (src/settle/): nothing to settle for an id never scheduled; one due in an hour is not due yet.
    expect((await call('POST', '/v1/timeouts/order.unpaid/203/settle')).body).toMatchObject({ outcome: 'not_found' });
    await call('POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: '204', delayMs: 3_600_000 });
    expect((await call('POST', '/v1/timeouts/order.unpaid/204/settle')).body).toMatchObject({ outcome: 'not_due', state: 'pending' });
  });

  it('schedules a batch of 5,000 in one transaction; a batch that fails in the database writes none of its rows', async () => {
    const timeouts = Array.from({ length: 5000 }, (_, i) => ({ kind: 'order.unpaid', bizId: String(100_000 + i), delayMs: 3_600_000 }));
    const res = await call('POST', '/v1/timeouts/batch', { timeouts });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ transaction: 'all-or-nothing', count: 5000, created: 5000 });
    expect((res.body['timeouts'] as { bizId: string }[])[4999]!.bizId).toBe('104999');
    expect(await count("biz_id LIKE '1_____'")).toBe(5000);
    // Again with one new: 4,999 moved, 1 created.
    const again = await call('POST', '/v1/timeouts/batch', { timeouts: [...timeouts.slice(1), { kind: 'order.unpaid', bizId: '200000', delayMs: 3_600_000 }] });
    expect(again.body).toMatchObject({ count: 5000, created: 1 });
    // One row the database refuses (a trigger raises on it): nothing of the batch is written.
    await pool.query(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.biz_id = 'poison' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER refuse_poison BEFORE INSERT ON timeout_center.timeouts FOR EACH ROW EXECUTE FUNCTION refuse_poison()`);
    try {
      const bad = [
        ...Array.from({ length: 100 }, (_, i) => ({ kind: 'order.unpaid', bizId: `c-${i}`, delayMs: 1000 })),
        { kind: 'order.unpaid', bizId: 'poison', delayMs: 1 },
      ];
      const refused = await call('POST', '/v1/timeouts/batch', { timeouts: bad });
      expect(refused.status).toBe(500);
      expect(refused.body.error).toMatchObject({ code: 'internal' });
      expect(await count("biz_id LIKE 'c-%' OR biz_id = 'poison'")).toBe(0);
    } finally {
      await pool.query('DROP TRIGGER refuse_poison ON timeout_center.timeouts; DROP FUNCTION refuse_poison()');
    }
    // A kind the config declares but the database does not know: 400 unknown_kind, nothing written.
    const stale = await call(
      'POST',
      '/v1/timeouts/batch',
      {
        timeouts: [
          { kind: 'order.unpaid', bizId: 'd-1', delayMs: 1 },
          { kind: 'order.extra', bizId: 'd-2', delayMs: 1 },
        ],
      },
      ORDERS_TOKEN,
      standaloneBase,
    );
    expect(stale.status).toBe(400);
    expect(stale.body.error).toMatchObject({ code: 'unknown_kind' });
    expect(await count("biz_id LIKE 'd-%'")).toBe(0);
  });

  it('a token may act on its kinds and verbs only: anything else is 401 or 403 and changes nothing', async () => {
    const before = await count();
    const cases: [string, string, unknown, string | null, number, string, string?][] = [
      ['POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'e-1', delayMs: 1 }, null, 401, 'unauthenticated'],
      ['POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'e-1', delayMs: 1 }, 'not-a-token-0123456789', 401, 'unauthenticated'],
      ['POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'e-1', delayMs: 1 }, SHIP_TOKEN, 403, 'forbidden', 'kind'],
      ['POST', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'e-1', delayMs: 1 }, READER_TOKEN, 403, 'forbidden', 'kind'],
      [
        'POST',
        '/v1/timeouts/batch',
        {
          timeouts: [
            { kind: 'order.unshipped', bizId: 'e-2', delayMs: 1 },
            { kind: 'order.unpaid', bizId: 'e-3', delayMs: 1 },
          ],
        },
        SHIP_TOKEN,
        403,
        'forbidden',
        'timeouts.1.kind',
      ],
      ['POST', '/v1/timeouts/order.unpaid/101/cancel', undefined, SHIP_TOKEN, 403, 'forbidden', 'kind'],
      ['POST', '/v1/timeouts/order.unshipped/e-4/cancel', undefined, SHIP_TOKEN, 403, 'forbidden', 'kind'],
      ['POST', '/v1/timeouts/order.unpaid/101/reschedule', { delayMs: 5 }, READER_TOKEN, 403, 'forbidden', 'kind'],
      ['POST', '/v1/timeouts/order.unpaid/101/settle', undefined, SHIP_TOKEN, 403, 'forbidden', 'kind'],
      ['GET', '/v1/timeouts/order.unpaid/101', undefined, SHIP_TOKEN, 403, 'forbidden', 'kind'],
    ];
    for (const [method, path, body, token, status, code, field] of cases) {
      const res = await call(method, path, body, token);
      expect({ path, token, status: res.status, code: res.body.error?.code, field: res.body.error?.field }).toEqual({ path, token, status, code, field });
    }
    expect(await count()).toBe(before);
    expect((await call('GET', '/v1/timeouts/order.unpaid/101')).body['state']).toBe('pending'); // the cancel did not act
    // The readiness probe and the document need no token (nothing in them).
    expect(await call('GET', '/v1/health', undefined, null)).toEqual({ status: 200, body: { status: 'ok' } });
    expect((await call('GET', '/v1/openapi.json', undefined, null)).body['openapi']).toBe('3.1.0');
    expect((await call('GET', '/v1/timeouts/order.unpaid/101', undefined, READER_TOKEN)).status).toBe(200);
    expect((await call('POST', '/v1/timeouts', { kind: 'order.unshipped', bizId: 'e-5', delayMs: 3_600_000 }, SHIP_TOKEN)).status).toBe(200);
    // The typed client (generated from the document) speaks the same API.
    const client = createApiClient({ baseUrl: base, token: ORDERS_TOKEN });
    const { data, error } = await client.POST('/v1/timeouts', { body: { kind: 'order.unpaid', bizId: 'e-6', delayMs: 3_600_000 } });
    expect(error).toBeUndefined();
    expect(data).toMatchObject({ bizId: 'e-6', created: true });
    const forbidden = await createApiClient({ baseUrl: base, token: SHIP_TOKEN }).GET('/v1/timeouts/{kind}/{bizId}', {
      params: { path: { kind: 'order.unpaid', bizId: 'e-6' } },
    });
    expect(forbidden.error?.error.code).toBe('forbidden');
  });

  it('bad input: each answered with its code and field within a bounded time, nothing written', async () => {
    const before = await count();
    const one = { kind: 'order.unpaid', bizId: 'f-1', delayMs: 1000 };
    const cases: [string, string, unknown, number, string, string?][] = [
      ['malformed JSON', '/v1/timeouts', '{"kind": "order.unpaid", "bizId": ', 400, 'malformed_json'],
      ['a JSON array', '/v1/timeouts', '[1, 2]', 400, 'invalid_request'],
      ['bizId a number', '/v1/timeouts', { ...one, bizId: 42 }, 400, 'invalid_request', 'bizId'],
      ['delayMs a string', '/v1/timeouts', { ...one, delayMs: '1000' }, 400, 'invalid_request', 'delayMs'],
      ['negative delay', '/v1/timeouts', { ...one, delayMs: -1 }, 400, 'invalid_request', 'delayMs'],
      ['unknown field', '/v1/timeouts', { ...one, colour: 'red' }, 400, 'invalid_request', 'colour'],
      ['no due time', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'f-1' }, 400, 'invalid_request', 'dueAt'],
      ['both due times', '/v1/timeouts', { ...one, dueAt: '2030-01-01T00:00:00Z' }, 400, 'invalid_request', 'dueAt'],
      ['year 10000', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'f-1', dueAt: '10000-01-01T00:00:00Z' }, 400, 'invalid_request', 'dueAt'],
      ['no offset', '/v1/timeouts', { kind: 'order.unpaid', bizId: 'f-1', dueAt: '2030-01-01T00:00:00' }, 400, 'invalid_request', 'dueAt'],
      ['unknown kind', '/v1/timeouts', { ...one, kind: 'order.unknown' }, 400, 'unknown_kind', 'kind'],
      ['bizId too long', '/v1/timeouts', { ...one, bizId: 'x'.repeat(201) }, 400, 'invalid_request', 'bizId'],
      ['empty batch', '/v1/timeouts/batch', { timeouts: [] }, 400, 'invalid_request', 'timeouts'],
      [
        'batch over 5,000',
        '/v1/timeouts/batch',
        { timeouts: Array.from({ length: 5001 }, (_, i) => ({ ...one, bizId: `f-${i}` })) },
        400,
        'invalid_request',
        'timeouts',
      ],
      ['duplicate in batch', '/v1/timeouts/batch', { timeouts: [one, { ...one, delayMs: 5 }] }, 400, 'duplicate_in_batch', 'timeouts.1.bizId'],
      [
        'bad item in batch',
        '/v1/timeouts/batch',
        { timeouts: [one, { ...one, bizId: 'f-2', dueAt: '10000-01-01T00:00:00Z', delayMs: undefined }] },
        400,
        'invalid_request',
        'timeouts.1.dueAt',
      ],
      ['unknown kind in batch', '/v1/timeouts/batch', { timeouts: [one, { ...one, bizId: 'f-3', kind: 'nope' }] }, 400, 'unknown_kind', 'timeouts.1.kind'],
      ['over the size limit', '/v1/timeouts/batch', { timeouts: [{ ...one, payload: 'x'.repeat(BODY_LIMIT) }] }, 413, 'body_too_large'],
      ['bad kind in the path', '/v1/timeouts/Order!/1/cancel', undefined, 400, 'invalid_request', 'kind'],
      ['no such route', '/v1/timeouts/order.unpaid/1/close', undefined, 404, 'not_found'],
    ];
    for (const [what, path, body, status, code, field] of cases) {
      const started = Date.now();
      const res = await call('POST', path, body);
      expect({ what, status: res.status, code: res.body.error?.code, field: res.body.error?.field }).toEqual({ what, status, code, field });
      expect(Date.now() - started).toBeLessThan(5000);
    }
    const wrongType = await fetch(`${base}/v1/timeouts`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ORDERS_TOKEN}`, 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(wrongType.status).toBe(415);
    expect(((await wrongType.json()) as { error: { code: string } }).error.code).toBe('unsupported_media_type');
    expect(await count()).toBe(before);
  });

  it('a body over the limit is answered 413 and the client reads it: read to its end on a connection kept open, or far over, closed in stages within the bound', async () => {
    // Closing while the client still sends makes its next write fail (EPIPE), and fetch then drops
    // the answer it was sent; it did so in most tries before the server read such bodies out.
    const before = await count();
    const body = JSON.stringify({ kind: 'order.unpaid', bizId: 'big-1', delayMs: 1, payload: 'x'.repeat(3 * BODY_LIMIT) });
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${base}/v1/timeouts`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ORDERS_TOKEN}`, 'content-type': 'application/json' },
        body,
      });
      expect(res.status).toBe(413);
      expect(res.headers.get('connection')).not.toBe('close');
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('body_too_large');
    }
    // Far over it (more than four times the limit), the answer goes out at once and the
    // connection closes in stages: the answer, then the server's end, then it reads the rest into
    // the void until the client's end (within the body's time bound). Closed at once, the unread
    // bytes made the kernel reset the connection, and the client's write failed (EPIPE) before it
    // read the answer: about half the tries lost it (51 of 100 by hand, one CI run).
    const huge = 'x'.repeat(5 * BODY_LIMIT);
    const answers: Record<string, number> = {};
    for (let i = 0; i < 20; i++) {
      const what = await overLimit('POST', `${base}/v1/timeouts`, { authorization: `Bearer ${ORDERS_TOKEN}`, 'content-type': 'application/json' }, huge).then(
        (res) => `${res.status} ${res.body.error?.code} ${res.headers.connection}`,
        (err: NodeJS.ErrnoException) => `failed: ${err.code ?? err.message}`,
      );
      answers[what] = (answers[what] ?? 0) + 1;
    }
    expect(answers).toEqual({ '413 body_too_large close': 20 });
    // A client that goes on sending after its answer is cut off at the body's time bound: it
    // cannot keep the server reading.
    const { port } = new URL(base);
    const started = Date.now();
    const endless = await new Promise<{ text: string; ms: number }>((resolve) => {
      // It goes on after the server's end (allowHalfOpen), as a client that does not read would.
      const socket = net.connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: true });
      let text = '';
      socket.setEncoding('utf8');
      socket.on('data', (d: string) => (text += d));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ text, ms: Date.now() - started }));
      socket.write(
        `POST /v1/timeouts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ORDERS_TOKEN}\r\ncontent-type: application/json\r\ncontent-length: ${1e12}\r\n\r\n`,
      );
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const pump = () => {
        while (!socket.destroyed && socket.write(chunk));
        if (!socket.destroyed) socket.once('drain', pump);
      };
      pump();
    });
    expect(endless.text).toMatch(/^HTTP\/1.1 413 /);
    expect(endless.text).toContain('body_too_large');
    expect(endless.ms).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 100);
    expect(endless.ms).toBeLessThan(REQUEST_TIMEOUT_MS + 2000);
    expect(await count()).toBe(before);
  });

  it('a client that never finishes its body is answered 408 within the bound, and nothing is written', async () => {
    const before = await count();
    const { port } = new URL(base);
    const started = Date.now();
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(port), '127.0.0.1');
      let text = '';
      socket.setEncoding('utf8');
      socket.on('data', (d: string) => (text += d));
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
      const body = JSON.stringify({ kind: 'order.unpaid', bizId: 'g-1', delayMs: 1 });
      socket.write(
        `POST /v1/timeouts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ORDERS_TOKEN}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 10)}`,
      );
      setTimeout(() => reject(new Error(`no answer within 10 s; got ${text}`)), 10_000);
    });
    const elapsed = Date.now() - started;
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
    expect(answer).toContain('"code":"request_timeout"');
    expect(elapsed).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50);
    expect(elapsed).toBeLessThan(REQUEST_TIMEOUT_MS + 3000);
    expect(await count()).toBe(before);
  });

  it('refuses to serve without tokens on a non-loopback address', async () => {
    const open = writeConfig({ kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    const refused = await runCli(['api', '-c', open, '--host', '0.0.0.0', '--port', '0'], { DATABASE_URL: db.url, TC_API_TOKENS: '' });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('refusing to serve the API on 0.0.0.0 without tokens');
  }, 60_000);

  it('no token ever reaches the logs (at debug level, after every call above)', () => {
    const everything = [runner, standalone].map((p) => JSON.stringify(p.lines) + p.stderr).join('\n');
    expect(everything).toContain('api request'); // the calls were logged
    for (const token of [ORDERS_TOKEN, SHIP_TOKEN, READER_TOKEN, 'not-a-token-0123456789']) expect(everything).not.toContain(token);
  });
});
