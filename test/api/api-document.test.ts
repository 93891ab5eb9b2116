// The API's OpenAPI document against the server that serves it: the committed document and
// generated client are current; every route the server answers is in the document and every
// documented operation is answered; and each documented request schema accepts exactly the bodies
// and paths the server accepts (the document's JSON Schema read back by an independent validator,
// zod's fromJSONSchema, against the real server on a real database), and the answers match the
// documented response schemas.
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
// @ts-expect-error -- a plain .mjs module shared with the generation script
import { clientSource, documentText } from '../../scripts/api-client.mjs';
import { ApiBackend } from '../../src/api/backend.js';
import { openApiDocument } from '../../src/api/document.js';
import { buildApiApp } from '../../src/api/server.js';
import { TokenTable } from '../../src/api/tokens.js';
import { syncKinds } from '../../src/db/kinds.js';
import { parseConfig } from '../../src/config.js';
import { CLOSE_SQL } from '../helpers/orders.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

type Doc = {
  paths: Record<string, Record<string, Operation>>;
  components: Record<string, unknown>;
};
type Operation = {
  parameters?: { in: string; name: string; schema: unknown }[];
  requestBody?: { content: { 'application/json': { schema: unknown } } };
  responses: Record<string, { content?: { 'application/json': { schema: unknown } } }>;
};

const ROOT = new URL('../../', import.meta.url);

/** The routes Fastify has, from its route tree: "POST /v1/timeouts/{kind}/{bizId}/cancel". */
function serverRoutes(app: FastifyInstance): string[] {
  const out: string[] = [];
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^([│ ]*)[├└]── (\S+)(?: \(([^)]+)\))?$/.exec(line);
    if (!m) continue;
    const depth = m[1]!.length / 4;
    stack.length = depth;
    const path = (stack[depth - 1] ?? '') + m[2]!;
    stack.push(path);
    for (const method of (m[3] ?? '').split(', ').filter((x) => x && x !== 'HEAD')) out.push(`${method} ${path.replace(/:(\w+)/g, '{$1}')}`);
  }
  return out.sort();
}

function validator(doc: Doc, schema: unknown): z.ZodType {
  // zod resolves references under $defs: the document's components/schemas, moved there.
  const text = JSON.stringify({ ...(schema as object), $defs: (doc.components as { schemas: unknown }).schemas }).replaceAll(
    '#/components/schemas/',
    '#/$defs/',
  );
  return z.fromJSONSchema(JSON.parse(text) as Parameters<typeof z.fromJSONSchema>[0]);
}

describe('API document', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let app: FastifyInstance;
  let doc: Doc;

  beforeAll(async () => {
    db = await createTestDatabase('api_doc');
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const config = parseConfig({ kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    await syncKinds(pool, config.kinds);
    app = await buildApiApp({
      backend: new ApiBackend({ center: pool, stores: {}, kinds: config.kinds }),
      tokens: new TokenTable([]),
      logger: pino({ level: 'silent' }),
    });
    doc = (await app.inject({ method: 'GET', url: '/v1/openapi.json' })).json<Doc>();
  });

  afterAll(async () => {
    await app?.close();
    await tearDown({ pool, db });
  });

  it('docs/openapi.json and src/api/client.generated.ts are what `npm run api:client` writes now', async () => {
    const document = await openApiDocument();
    expect(doc).toEqual(document);
    expect(readFileSync(new URL('docs/openapi.json', ROOT), 'utf8')).toBe(documentText(document));
    expect(readFileSync(new URL('src/api/client.generated.ts', ROOT), 'utf8')).toBe(await clientSource(document));
  });

  it('every route the server answers is in the document, and every documented operation is answered', () => {
    const documented = Object.entries(doc.paths)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    expect(serverRoutes(app)).toEqual(documented);
    expect(documented).toContain('POST /v1/timeouts/batch');
  });

  // Bodies near the edges of each schema: the document and the server must agree on each.
  const one = { kind: 'order.unpaid', bizId: '1', delayMs: 1000 };
  const bodies: Record<string, unknown[]> = {
    'POST /v1/timeouts': [
      one,
      { ...one, payload: { any: ['json'] } },
      { kind: 'order.unpaid', bizId: '2', dueAt: '2030-01-01T00:00:00+08:00' },
      { kind: 'order.unpaid', bizId: '2', dueAt: '10000-01-01T00:00:00Z' },
      { kind: 'order.unpaid', bizId: '2', dueAt: '2030-01-01T00:00:00' },
      { kind: 'order.unpaid', bizId: '2', dueAt: 'tomorrow' },
      { kind: 'order.unpaid', bizId: '2' },
      { ...one, dueAt: '2030-01-01T00:00:00Z' },
      { ...one, delayMs: -1 },
      { ...one, delayMs: 1.5 },
      { ...one, delayMs: '5' },
      { ...one, bizId: 7 },
      { ...one, bizId: '' },
      { ...one, bizId: 'x'.repeat(200) },
      { ...one, bizId: 'x'.repeat(201) },
      { ...one, bizId: 'a\u0000b' },
      { ...one, bizId: 'a\ud800' },
      { ...one, bizId: '\udc00\ud800' },
      { ...one, bizId: '\ud83d\ude00'.repeat(200) },
      { ...one, bizId: '\ud83d\ude00'.repeat(201) },
      { ...one, kind: 'order.\u0000' },
      { ...one, kind: 'Order.Unpaid' },
      { ...one, extra: 1 },
      [one],
      'text',
      null,
    ],
    'POST /v1/timeouts/batch': [
      { timeouts: [one] },
      { timeouts: [] },
      { timeouts: Array.from({ length: 5000 }, (_, i) => ({ ...one, bizId: String(i) })) },
      { timeouts: Array.from({ length: 5001 }, (_, i) => ({ ...one, bizId: String(i) })) },
      { timeouts: [{ ...one, delayMs: -5 }] },
      { timeouts: [one], more: true },
      { items: [one] },
    ],
    'POST /v1/timeouts/{kind}/{bizId}/reschedule': [
      { delayMs: 5 },
      { dueAt: '2031-01-01T00:00:00Z' },
      {},
      { delayMs: 5, dueAt: '2031-01-01T00:00:00Z' },
      { delayMs: -5 },
      { at: 5 },
    ],
  };

  it('each documented request body schema accepts exactly what the server accepts', async () => {
    for (const [route, samples] of Object.entries(bodies)) {
      const [method, path] = route.split(' ') as [string, string];
      const schema = doc.paths[path]![method.toLowerCase()]!.requestBody!.content['application/json'].schema;
      const documented = validator(doc, schema);
      const url = path.replace('{kind}', 'order.unpaid').replace('{bizId}', '1');
      for (const body of samples) {
        const res = await app.inject({ method: 'POST', url, payload: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
        const accepted = res.statusCode === 200;
        const says = documented.safeParse(body).success;
        expect({ route, body: JSON.stringify(body).slice(0, 120), serverAccepts: accepted }).toEqual({
          route,
          body: JSON.stringify(body).slice(0, 120),
          serverAccepts: says,
        });
        if (!accepted) expect(res.json<{ error: { code: string } }>().error.code).toBe('invalid_request');
        // The answer is the documented one for its status.
        const answer = doc.paths[path]![method.toLowerCase()]!.responses[String(res.statusCode)]?.content?.['application/json'].schema;
        expect(answer, `${route} answered ${res.statusCode}, which the document does not list`).toBeDefined();
        expect(validator(doc, answer).safeParse(res.json()).success).toBe(true);
      }
    }
  });

  it('every operation lists the error answers it can give with the Error schema, 500 included', () => {
    const error = { $ref: '#/components/schemas/Error' };
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const codes = Object.keys(op.responses).filter((c) => c !== '200');
        const expected =
          path === '/v1/openapi.json' ? ['500'] : path === '/v1/health' ? ['500', '503'] : ['400', '401', '403', '404', '408', '413', '415', '500', '503'];
        if (path.endsWith('/settle')) expected.push('501');
        expect({ route: `${method} ${path}`, codes: codes.sort() }).toEqual({ route: `${method} ${path}`, codes: expected.sort() });
        for (const c of codes) expect(op.responses[c]!.content?.['application/json'].schema, `${method} ${path} ${c}`).toEqual(error);
      }
    }
  });

  it('each documented path parameter schema accepts exactly what the server accepts', async () => {
    const params = doc.paths['/v1/timeouts/{kind}/{bizId}/cancel']!['post']!.parameters!;
    const kindSchema = validator(doc, params.find((p) => p.name === 'kind')!.schema);
    const bizSchema = validator(doc, params.find((p) => p.name === 'bizId')!.schema);
    for (const [kind, bizId] of [
      ['order.unpaid', '1'],
      ['Order.Unpaid', '1'],
      ['order unpaid', '1'],
      ['order.unpaid', 'x'.repeat(200)],
      ['order.unpaid', 'x'.repeat(201)],
      ['order.unpaid', 'a/b'],
      ['order.unpaid', 'a\u0000b'],
      ['order\u0000', '1'],
      ['order.unpaid', '\ud83d\ude00'.repeat(200)],
    ] as const) {
      const res = await app.inject({ method: 'POST', url: `/v1/timeouts/${encodeURIComponent(kind)}/${encodeURIComponent(bizId)}/cancel` });
      const says = kindSchema.safeParse(kind).success && bizSchema.safeParse(bizId).success;
      expect({ kind, bizId: bizId.slice(0, 20), serverAccepts: res.statusCode === 200 }).toEqual({ kind, bizId: bizId.slice(0, 20), serverAccepts: says });
    }
  });
});
