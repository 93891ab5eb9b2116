// Tracing of the HTTP API and of the external path (issue 33, docs/tracing.md): each API request
// is a SERVER span named after its route template, continuing the caller's traceparent, with its
// status code and, on a 4xx/5xx, the answer's stable error code (never a token or a body); the
// batch and the single schedule keep the request span's context with each timeout (none stored
// without tracing); the standalone `timeout-center api` exports its spans over OTLP when the
// OTEL_* variables say so; and on the external path (a business database) the shard span links to
// the claimed rows' distinct trace contexts, at most 32, as on the same-database path.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiBackend } from '../../src/api/backend.js';
import { startApi, type ApiServer } from '../../src/api/server.js';
import { sha256Hex, TokenTable } from '../../src/api/tokens.js';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/observability/logger.js';
import { startTracing, type Tracing } from '../../src/observability/tracing-sdk.js';
import { startRuntime, type Runtime } from '../../src/runtime.js';
import { schedule } from '../../src/schedule.js';
import { prepareBusinessDatabases } from '../../src/worker/business-db.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { spawnCli, type CliProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const TOKEN = 'tracing-api-token-0123456789abcdef';
const OTHER_TOKEN = 'tracing-other-token-0123456789abcdef';
const KIND = 'order.unpaid'; // external path: its SQL handler runs in the business database "orders"
const MANY = 'order.many'; // external path too: 40 distinct contexts in one shard
const LATER = 'order.later'; // the center's own kind, never due in this test
const PAYLOAD_MARK = 'payload-mark-4f1c';

const exporter = new InMemorySpanExporter();
let tracing: Tracing | undefined;
let center: TestDatabase;
let orders: TestDatabase;
let centerPool: pg.Pool;
let ordersPool: pg.Pool;
let api: ApiServer;
let runtime: Runtime | undefined;
let cli: CliProcess | undefined;
let sink: Server | undefined;

const traceId = (n: number) => n.toString(16).padStart(32, 'a');
const spanId = (n: number) => n.toString(16).padStart(16, 'b');
const traceparent = (n: number) => `00-${traceId(n)}-${spanId(n)}-01`;
const contextOf = (s: ReadableSpan) => `00-${s.spanContext().traceId}-${s.spanContext().spanId}-01`;
const spans = (name: string): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.name === name);

async function call(method: string, path: string, options: { body?: unknown; token?: string | null; traceparent?: string } = {}) {
  const headers: Record<string, string> = {};
  const token = options.token === undefined ? TOKEN : options.token;
  if (token) headers['authorization'] = `Bearer ${token}`;
  if (options.traceparent) headers['traceparent'] = options.traceparent;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${api.url}${path}`, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const traceParents = async (kind: string, bizIds: string[]) =>
  (
    await centerPool.query<{ biz_id: string; trace_parent: string | null }>(
      'SELECT biz_id, trace_parent FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = ANY($2) ORDER BY biz_id',
      [kind, bizIds],
    )
  ).rows;

async function waitFor(what: string, check: () => Promise<boolean> | boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  center = await createTestDatabase('tracing-api');
  orders = await createTestDatabase('tracing-api-orders');
  centerPool = new pg.Pool({ connectionString: center.url, max: 4 });
  ordersPool = new pg.Pool({ connectionString: orders.url, max: 3 });
  await createOrdersSchema(ordersPool);
  await createOrdersSchema(centerPool); // order.later's handler's table (never due here)
  const logger = createLogger('silent');
  expect((await prepareBusinessDatabases({ orders: orders.url }, logger)).prepared).toEqual(['orders']);
  const kinds = {
    [KIND]: { shardSize: 100, handler: { type: 'sql' as const, sql: CLOSE_SQL, database: 'orders' } },
    [MANY]: { shardSize: 100, handler: { type: 'sql' as const, sql: CLOSE_SQL, database: 'orders' } },
    [LATER]: { handler: { type: 'sql' as const, sql: CLOSE_SQL } },
  };
  // The runtime syncs the kinds into the center (and the API refuses a kind the database lacks):
  // it starts now, before any timeout is scheduled; the SDK is registered later, its spans go there.
  const config = loadConfig({
    object: {
      redisKeyPrefix: testKeyPrefix('tracing-api'),
      businessDatabases: { orders: { url: orders.url } },
      kinds,
      coordinator: { minTickIntervalMs: 50 },
      worker: { blockMs: 100, concurrency: 2 },
      logLevel: 'silent',
    },
    env: { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL },
  });
  runtime = await startRuntime({ config, logger, coordinator: true, worker: true });
  const tokens = new TokenTable([
    { name: 'orders', sha256: sha256Hex(TOKEN), kinds: 'all', verbs: new Set(['schedule', 'get', 'cancel', 'reschedule', 'settle']) },
    { name: 'other', sha256: sha256Hex(OTHER_TOKEN), kinds: new Set(['order.nothing']), verbs: new Set(['schedule']) },
  ]);
  api = await startApi({
    backend: new ApiBackend({ center: centerPool, stores: {}, kinds: config.kinds }),
    tokens,
    logger,
    host: '127.0.0.1',
    port: 0,
  });
});

afterAll(async () => {
  await cli?.stop(10_000);
  await new Promise((r) => (sink ? sink.close(r) : r(undefined)));
  await api?.close();
  await runtime?.stop();
  await tracing?.shutdown();
  await ordersPool?.end();
  await orders?.drop();
  await tearDown({ pool: centerPool, db: center });
});

describe('tracing of the API and of the external path', () => {
  it('without tracing configured, a request that sends a traceparent stores none (NULL)', async () => {
    const batch = await call('POST', '/v1/timeouts/batch', {
      traceparent: traceparent(1),
      body: { timeouts: [1, 2, 3].map((i) => ({ kind: LATER, bizId: `off-${i}`, delayMs: 3_600_000 })) },
    });
    expect(batch.status).toBe(200);
    const one = await call('POST', '/v1/timeouts', { traceparent: traceparent(2), body: { kind: LATER, bizId: 'off-4', delayMs: 3_600_000 } });
    expect(one.status).toBe(200);
    const rows = await traceParents(LATER, ['off-1', 'off-2', 'off-3', 'off-4']);
    expect(rows).toHaveLength(4);
    expect(rows.every((r) => r.trace_parent === null)).toBe(true);
    // Nothing stored: the pending rows carry no trace bytes.
    const { rows: size } = await centerPool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE kind = $1 AND pg_column_size(trace_parent) IS NOT NULL`,
      [LATER],
    );
    expect(size[0]!.n).toBe(0);
  });

  it('each request is a SERVER span named after its route, continuing the traceparent; the batch and the single schedule keep its context', async () => {
    tracing = startTracing({ exporter, simple: true });
    expect(tracing).toBeDefined();
    const batch = await call('POST', '/v1/timeouts/batch', {
      traceparent: traceparent(3),
      body: { timeouts: [1, 2, 3].map((i) => ({ kind: LATER, bizId: `on-${i}`, delayMs: 3_600_000, payload: { mark: PAYLOAD_MARK } })) },
    });
    expect(batch.status).toBe(200);
    const batchSpan = spans('POST /v1/timeouts/batch').find((s) => s.spanContext().traceId === traceId(3));
    expect(batchSpan, 'the batch request span').toBeDefined();
    expect(batchSpan!.kind).toBe(SpanKind.SERVER);
    expect(batchSpan!.parentSpanContext?.spanId).toBe(spanId(3));
    expect(batchSpan!.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/v1/timeouts/batch',
      'http.response.status_code': 200,
      'tc.api.token': 'orders',
    });
    expect(batchSpan!.attributes['error.type']).toBeUndefined();
    const rows = await traceParents(LATER, ['on-1', 'on-2', 'on-3']);
    expect(rows.map((r) => r.trace_parent)).toEqual([contextOf(batchSpan!), contextOf(batchSpan!), contextOf(batchSpan!)]);

    // No traceparent sent: the request starts a trace of its own, and its context is kept.
    expect((await call('POST', '/v1/timeouts', { body: { kind: LATER, bizId: 'on-4', delayMs: 3_600_000 } })).status).toBe(200);
    const single = spans('POST /v1/timeouts').at(-1)!;
    expect(single.parentSpanContext).toBeUndefined();
    expect((await traceParents(LATER, ['on-4']))[0]!.trace_parent).toBe(contextOf(single));

    // A moved pending timeout takes the new request's context (as schedule.sql does).
    expect((await call('POST', '/v1/timeouts', { traceparent: traceparent(4), body: { kind: LATER, bizId: 'on-4', delayMs: 3_600_000 } })).status).toBe(200);
    const again = spans('POST /v1/timeouts').find((s) => s.spanContext().traceId === traceId(4))!;
    expect((await traceParents(LATER, ['on-4']))[0]!.trace_parent).toBe(contextOf(again));

    // The route template names the span, never the raw URL.
    expect((await call('GET', '/v1/timeouts/order.later/on-1')).status).toBe(200);
    const get = spans('GET /v1/timeouts/:kind/:bizId').at(-1)!;
    expect(get.attributes).toMatchObject({
      'http.route': '/v1/timeouts/:kind/:bizId',
      'url.path': '/v1/timeouts/order.later/on-1',
      'http.response.status_code': 200,
    });
  });

  it('a 4xx carries the status code and the stable error code; never a token or a body in an attribute', async () => {
    exporter.reset();
    expect((await call('POST', '/v1/timeouts', { token: null, body: { kind: LATER, bizId: 'x', delayMs: 1 } })).status).toBe(401);
    expect((await call('POST', '/v1/timeouts', { token: 'not-a-valid-token-0123456789', body: { kind: LATER, bizId: 'x', delayMs: 1 } })).status).toBe(401);
    expect(
      (await call('POST', '/v1/timeouts', { token: OTHER_TOKEN, body: { kind: LATER, bizId: 'x', delayMs: 1, payload: { mark: PAYLOAD_MARK } } })).status,
    ).toBe(403);
    expect((await call('POST', '/v1/timeouts', { body: { kind: LATER, bizId: 'x', dueAt: '10000-01-01T00:00:00Z' } })).status).toBe(400);
    expect((await call('POST', '/v1/timeouts/batch', { body: { timeouts: [{ kind: 'order.nothing', bizId: 'x', delayMs: 1 }] } })).status).toBe(400);
    expect((await call('GET', '/v1/timeouts/order.later/never')).status).toBe(404);
    expect((await call('GET', '/v1/nowhere?token=abc')).status).toBe(404);
    const answered = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER);
    const summary = answered.map((s) => [s.name, s.attributes['http.response.status_code'], s.attributes['error.type']]);
    expect(summary).toEqual([
      ['POST /v1/timeouts', 401, 'unauthenticated'],
      ['POST /v1/timeouts', 401, 'unauthenticated'],
      ['POST /v1/timeouts', 403, 'forbidden'],
      ['POST /v1/timeouts', 400, 'invalid_request'],
      ['POST /v1/timeouts/batch', 400, 'unknown_kind'],
      ['GET /v1/timeouts/:kind/:bizId', 404, 'not_found'],
      ['GET', 404, 'not_found'],
    ]);
    // A 4xx is the caller's error: the span's status stays unset (a 5xx would be ERROR).
    expect(answered.every((s) => s.status.code === SpanStatusCode.UNSET)).toBe(true);
    expect(answered.find((s) => s.name === 'GET')!.attributes['url.path']).toBe('/v1/nowhere');
    const everything = JSON.stringify(answered.map((s) => ({ attributes: s.attributes, events: s.events, status: s.status })));
    for (const secret of [TOKEN, OTHER_TOKEN, 'not-a-valid-token', 'Bearer', PAYLOAD_MARK, 'token=abc']) expect(everything).not.toContain(secret);
  });

  it('timeout-center api exports its request spans over OTLP when OTEL_* configure it', async () => {
    const received: string[] = [];
    sink = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push(body);
        res.setHeader('content-type', 'application/json');
        res.end('{}');
      });
    });
    await new Promise<void>((r) => sink!.listen(0, '127.0.0.1', r));
    const sinkPort = (sink.address() as AddressInfo).port;
    const configPath = writeConfig({ logLevel: 'info', kinds: { [LATER]: { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    const port = await freePort();
    cli = spawnCli('api', ['api', '-c', configPath, '--port', String(port)], {
      DATABASE_URL: center.url,
      REDIS_URL: '',
      TC_API_TOKENS: JSON.stringify([{ name: 'cli', token: TOKEN, kinds: ['*'], verbs: ['*'] }]),
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${sinkPort}`,
      OTEL_SERVICE_NAME: 'tc-api-under-test',
      OTEL_BSP_SCHEDULE_DELAY: '100',
    });
    await cli.waitForMsg('api listening', 60_000);
    expect(cli.lines.some((l) => l.msg === 'tracing: spans exported (OpenTelemetry)')).toBe(true);
    const res = await fetch(`http://127.0.0.1:${port}/v1/timeouts/batch`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', traceparent: traceparent(5) },
      body: JSON.stringify({ timeouts: [{ kind: LATER, bizId: 'cli-1', delayMs: 3_600_000 }] }),
    });
    expect(res.status).toBe(200);
    await waitFor('the OTLP export', () => received.some((b) => b.includes('POST /v1/timeouts/batch')), 15_000);
    const exported = received.find((b) => b.includes('POST /v1/timeouts/batch'))!;
    expect(exported).toContain(traceId(5));
    expect(exported).toContain('tc-api-under-test');
    expect(exported).not.toContain(TOKEN);
    const stored = (await traceParents(LATER, ['cli-1']))[0]!.trace_parent;
    expect(stored).toMatch(new RegExp(`^00-${traceId(5)}-[0-9a-f]{16}-01$`));
    expect(stored).not.toBe(traceparent(5)); // the server span's own context, a child of the caller's
  });

  it('on the external path (a business database) the shard span links to the distinct trace contexts of its rows, at most 32', async () => {
    exporter.reset();
    await ordersPool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, 240) g`);
    const dueAt = new Date(Date.now() + 4000).toISOString();
    // KIND: orders 1-40 in one traced batch request, 41-60 in another, 61-70 each by a request of
    // its own, 71-80 with none: 12 distinct contexts, every one linked once.
    // MANY: orders 201-240 each by a request of its own: 40 distinct contexts, 32 linked.
    const batchA = await call('POST', '/v1/timeouts/batch', {
      traceparent: traceparent(10),
      body: { timeouts: Array.from({ length: 40 }, (_, i) => ({ kind: KIND, bizId: String(i + 1), dueAt })) },
    });
    const batchB = await call('POST', '/v1/timeouts/batch', {
      traceparent: traceparent(11),
      body: { timeouts: Array.from({ length: 20 }, (_, i) => ({ kind: KIND, bizId: String(i + 41), dueAt })) },
    });
    expect([batchA.status, batchB.status]).toEqual([200, 200]);
    const expected = new Map<string, string | null>();
    const spanA = spans('POST /v1/timeouts/batch').find((s) => s.spanContext().traceId === traceId(10))!;
    const spanB = spans('POST /v1/timeouts/batch').find((s) => s.spanContext().traceId === traceId(11))!;
    for (let i = 1; i <= 40; i += 1) expected.set(`${KIND} ${i}`, contextOf(spanA));
    for (let i = 41; i <= 60; i += 1) expected.set(`${KIND} ${i}`, contextOf(spanB));
    const scheduleOne = async (kind: string, i: number, tp: string | null) => {
      await schedule(centerPool, { kind, bizId: i, dueAt: new Date(dueAt), traceparent: tp });
      expected.set(`${kind} ${i}`, tp);
    };
    for (let i = 61; i <= 70; i += 1) await scheduleOne(KIND, i, traceparent(100 + i));
    for (let i = 71; i <= 80; i += 1) await scheduleOne(KIND, i, null);
    for (let i = 201; i <= 240; i += 1) await scheduleOne(MANY, i, traceparent(1000 + i));
    const stored = await centerPool.query<{ key: string; trace_parent: string | null }>(
      `SELECT kind || ' ' || biz_id AS key, trace_parent FROM timeout_center.timeouts WHERE kind IN ($1, $2)`,
      [KIND, MANY],
    );
    expect(new Map(stored.rows.map((r) => [r.key, r.trace_parent]))).toEqual(expected);

    const total = expected.size;
    await waitFor(
      'the orders closed',
      async () => (await ordersPool.query(`SELECT count(*)::int AS n FROM orders WHERE status = 'closed'`)).rows[0].n === total,
    );
    const history = async () =>
      (
        await centerPool.query<{ key: string; kind: string; shard_id: string }>(
          `SELECT kind || ' ' || biz_id AS key, kind, shard_id::text FROM timeout_center.done_timeouts WHERE kind IN ($1, $2)`,
          [KIND, MANY],
        )
      ).rows;
    await waitFor('the history', async () => (await history()).length === total);
    const byShard = new Map<string, { kind: string; contexts: Set<string> }>();
    for (const r of await history()) {
      const shard = byShard.get(r.shard_id) ?? { kind: r.kind, contexts: new Set<string>() };
      const tp = expected.get(r.key);
      if (tp) shard.contexts.add(tp);
      byShard.set(r.shard_id, shard);
    }
    const shardSpan = (id: string) => spans('tc.shard').find((s) => String(s.attributes['tc.shard.id']) === id && s.attributes['tc.shard.status'] === 'done');
    await waitFor('the shard spans', () => [...byShard.keys()].every((id) => shardSpan(id) !== undefined));
    const linked = new Set<string>();
    let capped = 0;
    for (const [id, { kind, contexts }] of byShard) {
      const span = shardSpan(id)!;
      expect(span.attributes['tc.kind']).toBe(kind);
      // The external path's claim, under the shard span.
      const steps = exporter.getFinishedSpans().filter((s) => s.parentSpanContext?.spanId === span.spanContext().spanId);
      expect(steps.find((s) => s.name === 'tc.claim')?.attributes['tc.claim.form']).toBe('external');
      const links = span.links.map((l) => `00-${l.context.traceId}-${l.context.spanId}-01`);
      expect(new Set(links).size, `shard ${id}: one link per distinct context`).toBe(links.length);
      expect(links.length, `shard ${id}: ${contexts.size} distinct contexts`).toBe(Math.min(32, contexts.size));
      expect(links.every((l) => contexts.has(l))).toBe(true);
      links.forEach((l) => linked.add(l));
      if (contexts.size > 32) capped += 1;
    }
    // Each API batch request is linked (once per shard that applied some of its rows).
    expect(linked.has(contextOf(spanA))).toBe(true);
    expect(linked.has(contextOf(spanB))).toBe(true);
    // MANY's 40 rows, due together, are one shard's claim (shardSize 100): it linked 32 of 40.
    expect(capped).toBe(1);
  });
});
