// What a client in another language can send that PostgreSQL cannot store (issue 48): JSON allows
// "\u0000" and lone UTF-16 surrogates ("\ud800") in any string, PostgreSQL text and jsonb refuse
// them, and a URL can carry %00 or bytes that are not UTF-8. Every string the API hands to
// PostgreSQL (kind, bizId, payload keys and values at any depth, the ids in the path), on every
// route, single and batch, is answered 400 naming the field, writes nothing and logs nothing at
// error level. Then settle of a timeout that is final already: already_final with its outcome, on
// the same-database path and the external path (the one-row shard); not_found only for an id never
// scheduled. The API runs in this process (serveApi, as `timeout-center api` does) so that its log
// lines can be read.
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiServer } from '../../src/api/server.js';
import { serveApi } from '../../src/cli/commands/api.js';
import { loadConfig } from '../../src/config.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const KIND = 'order.unpaid';
const ELSEWHERE = 'order.elsewhere'; // its handler runs in a business database: settle's external path

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServer;
const logLines: { level: number; msg: string; err?: unknown }[] = [];

beforeAll(async () => {
  db = await createTestDatabase('api_strings');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  await createOrdersSchema(pool);
  const object = {
    businessDatabases: { biz: { url: db.url } },
    kinds: {
      [KIND]: { handler: { type: 'sql' as const, sql: CLOSE_SQL } },
      [ELSEWHERE]: { handler: { type: 'sql' as const, sql: CLOSE_SQL, database: 'biz' } },
    },
  };
  const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL };
  const migrated = await runCli(['migrate', '-c', writeConfig(object)], env, 60_000);
  expect(migrated.code, migrated.stderr).toBe(0);
  const logger = pino({ level: 'debug' }, { write: (line: string) => void logLines.push(JSON.parse(line) as (typeof logLines)[number]) });
  api = await serveApi({ config: loadConfig({ object, env }), port: 0, host: '127.0.0.1', allowUnauthenticated: false, logger });
});

afterAll(async () => {
  await api?.close();
  await tearDown({ pool, db });
});

async function call(method: string, path: string, body?: unknown) {
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text) as Record<string, unknown> & { error?: { code: string; field?: string; message: string } } };
}

const count = async () => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM timeout_center.all_timeouts')).rows[0]!.n;

/** Strings JSON carries and PostgreSQL text refuses; JSON.stringify escapes the surrogates
 *  ("\ud800"), as a Python client's json.dumps does. */
const REFUSED: [string, string][] = [
  ['NUL', 'a\u0000b'],
  ['a lone high surrogate', 'a\ud800b'],
  ['a lone low surrogate', 'a\udc00'],
  ['a pair the wrong way round', '\udc00\ud800'],
];

/** Deeper than any payload the API takes (64 levels). */
const deep = (levels: number): unknown => {
  let v: unknown = 'x';
  for (let i = 0; i < levels; i += 1) v = [v];
  return v;
};

describe('strings PostgreSQL refuses', () => {
  it('every string field of every route, single and batch: 400 naming the field, nothing written, nothing logged at error level', async () => {
    const before = await count();
    const good = { kind: KIND, bizId: 's-1', delayMs: 3_600_000 };
    const cases: [string, string, string, unknown, string][] = [];
    for (const [what, bad] of REFUSED) {
      const bodies: [string, Record<string, unknown>, string][] = [
        ['kind', { ...good, kind: bad }, 'kind'],
        ['bizId', { ...good, bizId: bad }, 'bizId'],
        ['a payload value', { ...good, payload: { note: bad } }, 'payload.note'],
        ['a payload value deep inside', { ...good, payload: { lines: [{ sku: 'a' }, { sku: bad }] } }, 'payload.lines.1.sku'],
        ['a payload key', { ...good, payload: { ok: 1, [bad]: 1 } }, 'payload'],
        ['a payload that is the string', { ...good, payload: bad }, 'payload'],
      ];
      for (const [field, body, at] of bodies) {
        cases.push([`${what} in ${field}`, 'POST', '/v1/timeouts', body, at]);
        const batch = { timeouts: [{ ...good, bizId: 'b-0' }, { ...good, bizId: 'b-1', dueAt: '2030-01-01T00:00:00Z', delayMs: undefined }, body] };
        cases.push([`${what} in ${field}, third of a batch`, 'POST', '/v1/timeouts/batch', batch, `timeouts.2.${at}`]);
      }
      cases.push([`${what} in a reschedule's dueAt`, 'POST', '/v1/timeouts/order.unpaid/s-1/reschedule', { dueAt: `2030-01-01T00:00:00Z${bad}` }, 'dueAt']);
    }
    // Over the limits the document states.
    cases.push(['a bizId of 201 characters', 'POST', '/v1/timeouts', { ...good, bizId: 'x'.repeat(201) }, 'bizId']);
    cases.push(['a kind of 101 characters', 'POST', '/v1/timeouts', { ...good, kind: 'x'.repeat(101) }, 'kind']);
    cases.push(['a payload nested 65 levels', 'POST', '/v1/timeouts', { ...good, payload: deep(65) }, 'payload']);
    cases.push([
      'a payload nested 100,000 levels',
      'POST',
      '/v1/timeouts',
      `{"kind":"${KIND}","bizId":"s-2","delayMs":1,"payload":${'['.repeat(100_000)}${']'.repeat(100_000)}}`,
      'payload',
    ]);
    cases.push([
      'a batch payload nested 65 levels',
      'POST',
      '/v1/timeouts/batch',
      { timeouts: [good, { ...good, bizId: 's-3', payload: { a: deep(64) } }] },
      'timeouts.1.payload',
    ]);
    // The ids in the path, percent-encoded: %00 decodes to NUL; the UTF-8 form of a surrogate, a
    // truncated sequence and a bad escape decode to no string at all.
    const PATH_REFUSED: [string, string][] = [
      ['NUL', 'a%00b'],
      ['an encoded surrogate', 'a%ED%A0%80b'],
      ['a truncated UTF-8 sequence', 'a%C3'],
      ['a bad escape', 'a%ZZ'],
      ['201 characters', 'x'.repeat(201)],
      ['201 characters outside the BMP', encodeURIComponent('😀'.repeat(201))],
      ['5,000 characters', 'x'.repeat(5000)],
    ];
    for (const [what, bad] of PATH_REFUSED) {
      for (const [method, suffix, body] of [
        ['GET', '', undefined],
        ['POST', '/cancel', undefined],
        ['POST', '/reschedule', { delayMs: 5 }],
        ['POST', '/settle', undefined],
      ] as const) {
        cases.push([`${what} in the path's bizId (${method} ${suffix || 'get'})`, method, `/v1/timeouts/${KIND}/${bad}${suffix}`, body, 'bizId']);
        if (!what.includes('characters'))
          cases.push([`${what} in the path's kind (${method} ${suffix || 'get'})`, method, `/v1/timeouts/order.${bad}/s-1${suffix}`, body, 'kind']);
      }
    }
    const failures: unknown[] = [];
    for (const [what, method, path, body, field] of cases) {
      const res = await call(method, path, body);
      const got = { what, status: res.status, code: res.body.error?.code, field: res.body.error?.field };
      const want = { what, status: 400, code: 'invalid_request', field };
      if (JSON.stringify(got) !== JSON.stringify(want)) failures.push({ got, want, message: res.body.error?.message });
    }
    expect(failures).toEqual([]);
    expect(await count()).toBe(before);
    expect(logLines.filter((l) => l.level >= 50)).toEqual([]);
  });

  it('takes every string PostgreSQL can store: a bizId of 200 characters outside the BMP, payload strings with any other control or non-BMP character', async () => {
    const bizId = '😀'.repeat(200); // 200 characters (code points), 400 UTF-16 units
    const payload = { text: 'tab\tbell\u0007del\u007f\ufffd😀', '\u0001key': ['\ud83d\ude00'], nested: deep(63) };
    const one = await call('POST', '/v1/timeouts', { kind: KIND, bizId, delayMs: 3_600_000, payload });
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    const batch = await call('POST', '/v1/timeouts/batch', { timeouts: [{ kind: KIND, bizId: `${'😀'.repeat(199)}b`, delayMs: 3_600_000, payload }] });
    expect(batch.status, JSON.stringify(batch.body)).toBe(200);
    const { rows } = await pool.query<{ n: number; payload: unknown }>(
      'SELECT char_length(biz_id)::int AS n, payload FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = ANY($2) ORDER BY biz_id',
      [KIND, [bizId, `${'😀'.repeat(199)}b`]],
    );
    expect(rows).toEqual([
      { n: 200, payload },
      { n: 200, payload },
    ]);
    const got = await call('GET', `/v1/timeouts/${KIND}/${encodeURIComponent(bizId)}`);
    expect(got.body).toMatchObject({ bizId, state: 'pending' });
  });
});

describe('settle of a timeout that is final already', () => {
  async function dueOrder(kind: string, id: number) {
    await pool.query("INSERT INTO orders (id, status) VALUES ($1, 'unpaid')", [id]);
    expect((await call('POST', '/v1/timeouts', { kind, bizId: String(id), delayMs: 0 })).status).toBe(200);
  }

  it('same database: already_final with its outcome once applied, cancelled or failed; not_found only for an id never scheduled', async () => {
    await dueOrder(KIND, 48_001);
    expect((await call('POST', `/v1/timeouts/${KIND}/48001/settle`)).body).toMatchObject({ outcome: 'applied', state: 'done', result: 'applied' });
    const again = await call('POST', `/v1/timeouts/${KIND}/48001/settle`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ outcome: 'already_final', state: 'done', result: 'applied' });
    expect(again.body['detail']).toMatch(/settled by/);
    // Skipped by its guard (paid before the settle).
    await dueOrder(KIND, 48_002);
    await pool.query("UPDATE orders SET status = 'paid' WHERE id = 48002");
    expect((await call('POST', `/v1/timeouts/${KIND}/48002/settle`)).body).toMatchObject({ outcome: 'skipped' });
    expect((await call('POST', `/v1/timeouts/${KIND}/48002/settle`)).body).toMatchObject({ outcome: 'already_final', state: 'done', result: 'skipped' });
    // Cancelled, and failed for good.
    expect((await call('POST', '/v1/timeouts', { kind: KIND, bizId: '48003', delayMs: 3_600_000 })).status).toBe(200);
    expect((await call('POST', `/v1/timeouts/${KIND}/48003/cancel`)).body).toEqual({ cancelled: true });
    expect((await call('POST', `/v1/timeouts/${KIND}/48003/settle`)).body).toMatchObject({ outcome: 'already_final', state: 'cancelled' });
    await call('POST', '/v1/timeouts', { kind: KIND, bizId: '48004', delayMs: 3_600_000 });
    await pool.query("UPDATE timeout_center.timeouts SET state = 'failed', finished_at = now(), last_error = 'gave up' WHERE kind = $1 AND biz_id = '48004'", [
      KIND,
    ]);
    expect((await call('POST', `/v1/timeouts/${KIND}/48004/settle`)).body).toMatchObject({ outcome: 'already_final', state: 'failed' });
    // Never scheduled: not_found, the only case.
    expect((await call('POST', `/v1/timeouts/${KIND}/48999/settle`)).body).toMatchObject({ outcome: 'not_found' });
    // A kind whose rows share the id: the other kind's final timeout is not this one.
    expect((await call('POST', `/v1/timeouts/${ELSEWHERE}/48001/settle`)).body).toMatchObject({ outcome: 'not_found' });
  });

  it('external path (the one-row shard): already_final with the shard that applied it', async () => {
    await dueOrder(ELSEWHERE, 48_101);
    const first = await call('POST', `/v1/timeouts/${ELSEWHERE}/48101/settle`);
    expect(first.body).toMatchObject({ outcome: 'applied', result: 'applied' });
    expect(first.body['shardId']).toEqual(expect.any(Number));
    const again = await call('POST', `/v1/timeouts/${ELSEWHERE}/48101/settle`);
    expect(again.body).toMatchObject({ outcome: 'already_final', state: 'done', result: 'applied', shardId: first.body['shardId'] });
    const got = await call('GET', `/v1/timeouts/${ELSEWHERE}/48101`);
    expect(got.body).toMatchObject({ state: 'done', outcome: 'applied', shardId: first.body['shardId'] });
    expect(logLines.filter((l) => l.level >= 50)).toEqual([]);
  });
});
