// Tracing (issue 33, docs/tracing.md) in a real engine run: the OpenTelemetry SDK registered with an
// in-memory exporter, a coordinator and a worker in this process on the test's database and
// Redis. Timeouts scheduled inside a traced request keep its traceparent (sql/0022; none stored
// without one); the coordinator's ticks, the shards (lease, claim, handler, record), the HTTP
// handler's POST (its traceparent header is its span) and settle are spans; the shard span that
// applies a traced timeout links to the request's span, at most 32 links per shard.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/observability/logger.js';
import { tracingConfigured, withRequestSpan } from '../../src/observability/tracing.js';
import { startTracing, type Tracing } from '../../src/observability/tracing-sdk.js';
import { VERSION } from '../../src/version.js';
import { startRuntime, type Runtime } from '../../src/runtime.js';
import { schedule, TimeoutInputError } from '../../src/schedule.js';
import { settle } from '../../src/settle/settle.js';
import { CLOSE_SQL, createOrdersSchema } from '../helpers/orders.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const exporter = new InMemorySpanExporter();
let tracing: Tracing | undefined;
let db: TestDatabase;
let pool: pg.Pool;
let runtime: Runtime | undefined;
let server: Server;
const received: { traceparent: string | undefined; ids: string[] }[] = [];

beforeAll(async () => {
  tracing = startTracing({ exporter, simple: true });
  expect(tracing).toBeDefined();
  db = await createTestDatabase('tracing');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  // The HTTP kind's service: records the traceparent each POST carries and applies every id.
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const ids = (JSON.parse(body) as { items: { bizId: string }[] }).items.map((i) => i.bizId);
      received.push({ traceparent: req.headers['traceparent'] as string | undefined, ids });
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ applied: ids }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const config = loadConfig({
    object: {
      redisKeyPrefix: testKeyPrefix('tracing'),
      kinds: {
        'order.unpaid': { shardSize: 100, handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.notify': { handler: { type: 'http', url: `http://127.0.0.1:${port}/notify` } },
      },
      coordinator: { minTickIntervalMs: 50 },
      worker: { blockMs: 100, concurrency: 2 },
      logLevel: 'silent',
    },
    env: { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL },
  });
  runtime = await startRuntime({ config, logger: createLogger('silent'), coordinator: true, worker: true });
});

afterAll(async () => {
  await runtime?.stop();
  await tracing?.shutdown();
  await new Promise((r) => server?.close(r));
  await tearDown({ pool, db });
});

async function waitFor(what: string, check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const spans = (name: string): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.name === name);
const childrenOf = (parent: ReadableSpan): ReadableSpan[] =>
  exporter.getFinishedSpans().filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);

describe('tracing', () => {
  it('is off unless the OTEL_* variables configure it', () => {
    expect(tracingConfigured({})).toBe(false);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'otlp' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318', OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318', OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
  });

  it('keeps a request trace context with its timeouts, and the shard span that applies them links to it once (distinct contexts, at most 32)', async () => {
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, 50) g`);
    // A request from a caller that sent a traceparent: its server span continues that trace.
    const callerTrace = '0af7651916cd43dd8448eb211c80319c';
    let request: { traceId: string; spanId: string } | undefined;
    await withRequestSpan('POST', '/v1/timeouts', { traceparent: `00-${callerTrace}-b7ad6b7169203331-01` }, async (span) => {
      request = span.spanContext();
      // 40 timeouts in one traced request, due together: one shard of up to 100 applies them.
      for (let id = 1; id <= 40; id += 1) await schedule(pool, { kind: 'order.unpaid', bizId: id, delayMs: 3000 });
    });
    expect(request!.traceId).toBe(callerTrace);
    // The spans' resource names the package's version (src/version.ts, from package.json).
    const served = exporter.getFinishedSpans().find((s) => s.spanContext().spanId === request!.spanId);
    expect(served?.resource.attributes['service.version']).toBe(VERSION);
    // Outside any span: nothing stored. An explicit traceparent is kept as given; a bad one refused.
    for (let id = 41; id <= 45; id += 1) await schedule(pool, { kind: 'order.unpaid', bizId: id, delayMs: 3000 });
    const given = '00-11111111111111111111111111111111-2222222222222222-01';
    await schedule(pool, { kind: 'order.unpaid', bizId: 46, delayMs: 3000, traceparent: given });
    await expect(schedule(pool, { kind: 'order.unpaid', bizId: 47, delayMs: 3000, traceparent: 'nope' })).rejects.toBeInstanceOf(TimeoutInputError);
    const { rows } = await pool.query<{ biz_id: string; trace_parent: string | null }>(
      `SELECT biz_id, trace_parent FROM timeout_center.timeouts WHERE kind = 'order.unpaid' ORDER BY biz_id::int`,
    );
    const expected = `00-${request!.traceId}-${request!.spanId}-01`;
    expect(rows.filter((r) => Number(r.biz_id) <= 40).every((r) => r.trace_parent === expected)).toBe(true);
    expect(rows.filter((r) => Number(r.biz_id) > 40 && Number(r.biz_id) <= 45).every((r) => r.trace_parent === null)).toBe(true);
    expect(rows.find((r) => r.biz_id === '46')?.trace_parent).toBe(given);

    await waitFor('the orders closed', async () => (await pool.query(`SELECT count(*)::int AS n FROM orders WHERE status = 'closed'`)).rows[0].n === 46);
    // A shard span ends just after its commit: wait until the spans account for all 46.
    const doneShards = () => spans('tc.shard').filter((s) => s.attributes['tc.kind'] === 'order.unpaid' && s.attributes['tc.shard.status'] === 'done');
    await waitFor('the shard spans', async () => doneShards().reduce((n, s) => n + Number(s.attributes['tc.shard.done'] ?? 0), 0) >= 46);
    const shards = doneShards();
    expect(shards.length).toBeGreaterThan(0);
    expect(shards.every((s) => s.kind === SpanKind.CONSUMER)).toBe(true);
    const linked = shards.flatMap((s) => s.links);
    expect(shards.every((s) => s.links.length <= 32)).toBe(true);
    // One link per distinct context: each shard that applied some of the request's 40 links to it once.
    const toRequest = (s: ReadableSpan) => s.links.filter((l) => l.context.traceId === request!.traceId && l.context.spanId === request!.spanId);
    expect(shards.some((s) => toRequest(s).length === 1)).toBe(true);
    expect(shards.every((s) => toRequest(s).length <= 1)).toBe(true);
    expect(linked.some((l) => l.context.traceId === '11111111111111111111111111111111')).toBe(true);
    // Each shard span holds its steps.
    const applying = shards.find((s) => s.links.length > 0)!;
    expect(childrenOf(applying).map((c) => c.name)).toEqual(expect.arrayContaining(['tc.lease', 'tc.claim', 'tc.record']));
    expect(applying.attributes['tc.shard.done']).toBeGreaterThan(0);

    // The coordinator: ticks, with their steps; the map's span names the scan it wrote.
    const ticks = spans('tc.tick');
    expect(ticks.length).toBeGreaterThan(0);
    expect(childrenOf(ticks[0]!).map((c) => c.name)).toEqual(['tc.recover', 'tc.map', 'tc.reduce', 'tc.lag']);
    const scanIds = new Set(shards.map((s) => s.attributes['tc.scan.id']));
    expect(spans('tc.map').some((m) => scanIds.has(m.attributes['tc.scan.id']))).toBe(true);
  });

  it("the HTTP handler's POST is a client span whose traceparent the request carries; settle is a span", async () => {
    for (let id = 101; id <= 103; id += 1) await schedule(pool, { kind: 'order.notify', bizId: id, delayMs: 300 });
    await waitFor('the POST', async () => received.some((r) => r.ids.includes('103')));
    const headers = received.filter((r) => r.ids.includes('101')).map((r) => r.traceparent);
    const matching = () =>
      spans('POST').find((p) => p.kind === SpanKind.CLIENT && headers.includes(`00-${p.spanContext().traceId}-${p.spanContext().spanId}-01`));
    // The span ends once the reply is read: shortly after the service saw the request.
    await waitFor(`a POST span matching the header ${headers.join(', ')}`, async () => matching() !== undefined);
    const post = matching();
    expect(post!.attributes['http.response.status_code']).toBe(200);
    // Its parent is the shard's handler step, inside the shard span (which ends after the record).
    const finished = (id: string | undefined) => exporter.getFinishedSpans().find((s) => s.spanContext().spanId === id);
    await waitFor('the shard span', async () => {
      const step = finished(post!.parentSpanContext?.spanId);
      return step !== undefined && finished(step.parentSpanContext?.spanId) !== undefined;
    });
    const step = finished(post!.parentSpanContext?.spanId)!;
    expect(step.name).toBe('tc.handler');
    const shard = finished(step.parentSpanContext?.spanId)!;
    expect(shard.name).toBe('tc.shard');
    expect(shard.attributes['tc.kind']).toBe('order.notify');
    expect(childrenOf(shard).map((c) => c.name)).toEqual(expect.arrayContaining(['tc.lease', 'tc.claim', 'tc.handler', 'tc.record']));

    await pool.query(`INSERT INTO orders (id, status) VALUES (200, 'unpaid')`);
    await schedule(pool, { kind: 'order.unpaid', bizId: 200, delayMs: 60_000 });
    expect((await settle(pool, 'order.unpaid', '200')).outcome).toBe('not_due');
    await tracing!.provider.forceFlush();
    expect(spans('tc.settle').map((s) => s.attributes['tc.settle.outcome'])).toContain('not_due');
  });
});
