// The batch endpoint's answer, row by row, against the database (one pass builds the statement's
// arrays; the statement answers in the order sent with each due time in whole milliseconds): each
// answer is its own timeout's id, stored due time and created flag, whether it was new, a pending
// one moved, or a dispatched one left alone; due times given absolute (any offset, beyond the
// millisecond, before the epoch) and as delays on the database clock; kinds checked at the row that
// names them; and two batches over the same timeouts in opposite orders, sent at once and again and
// again, never deadlock (the statement inserts in (kind, biz_id) order).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiBackend } from '../../src/api/backend.js';
import { startApi, type ApiServer } from '../../src/api/server.js';
import { sha256Hex, TokenTable } from '../../src/api/tokens.js';
import { loadConfig } from '../../src/config.js';
import { syncKinds } from '../../src/db/kinds.js';
import { createLogger } from '../../src/observability/logger.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const TOKEN = 'batch-token-0123456789abcdef';
const NARROW = 'batch-narrow-token-0123456789';
const KIND = 'order.unpaid';

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServer;

type Answer = { id: number; kind: string; bizId: string; dueAt: string; created: boolean };

async function batch(timeouts: unknown[], token = TOKEN) {
  const res = await fetch(`${api.url}/v1/timeouts/batch`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ timeouts }),
  });
  return { status: res.status, body: (await res.json()) as { timeouts: Answer[]; count: number; created: number; error?: { code: string; field?: string } } };
}

/** The live (or latest) row of each biz_id, due time as the API writes it (ms, UTC). */
async function stored(bizIds: string[]) {
  const { rows } = await pool.query<{ id: string; biz_id: string; due_at: Date; state: string }>(
    `SELECT DISTINCT ON (biz_id) id, biz_id, due_at, state FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = ANY($2) ORDER BY biz_id, id DESC`,
    [KIND, bizIds],
  );
  return new Map(rows.map((r) => [r.biz_id, { id: Number(r.id), dueAt: r.due_at.toISOString(), state: r.state }]));
}

beforeAll(async () => {
  db = await createTestDatabase('api-batch');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  const config = loadConfig({
    object: { kinds: { [KIND]: { handler: { type: 'sql', sql: 'SELECT 1' } }, 'order.other': { handler: { type: 'sql', sql: 'SELECT 1' } } } },
    env: { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL },
  });
  await syncKinds(pool, config.kinds);
  const tokens = new TokenTable([
    { name: 'all', sha256: sha256Hex(TOKEN), kinds: 'all', verbs: new Set(['schedule']) },
    { name: 'narrow', sha256: sha256Hex(NARROW), kinds: new Set([KIND]), verbs: new Set(['schedule']) },
  ]);
  api = await startApi({
    backend: new ApiBackend({ center: pool, stores: {}, kinds: config.kinds }),
    tokens,
    logger: createLogger('silent'),
    host: '127.0.0.1',
    port: 0,
  });
});

afterAll(async () => {
  await api?.close();
  await tearDown({ pool, db });
});

describe('POST /v1/timeouts/batch, row by row', () => {
  it('answers each timeout in the order sent with its own id, stored due time and created flag: new, moved, or dispatched and left alone', async () => {
    // A pending one (moved by the batch) and a dispatched one (left alone), there before it.
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, 'r-moved', now() + interval '1 day'), ($1, 'r-held', now() + interval '1 day')`,
      [KIND],
    );
    await pool.query(`UPDATE timeout_center.timeouts SET state = 'dispatched' WHERE kind = $1 AND biz_id = 'r-held'`, [KIND]);
    const heldBefore = (await stored(['r-held'])).get('r-held')!;
    const sent = [
      { kind: KIND, bizId: 'r-z', delayMs: 60_000 },
      { kind: KIND, bizId: 'r-moved', dueAt: '2031-05-06T07:08:09.123456+02:00' },
      { kind: KIND, bizId: 'r-a', dueAt: '2030-01-01T00:00:00Z', payload: { amount: 3 } },
      { kind: KIND, bizId: 'r-held', delayMs: 1 },
      { kind: KIND, bizId: 'r-old', dueAt: '1969-12-31T23:59:59.999Z' },
      { kind: KIND, bizId: 'r-m', delayMs: 0, payload: null },
      { kind: KIND, bizId: 'r-year0', dueAt: '0000-01-01T00:00:00Z' }, // 1 BC to PostgreSQL
      { kind: KIND, bizId: 'r-\ud83d\ude00', delayMs: 5 }, // outside the BMP: a surrogate pair, one character
    ];
    const { rows: clock } = await pool.query<{ now: Date }>('SELECT now()');
    const res = await batch(sent);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ transaction: 'all-or-nothing', count: 8, created: 6 });
    const rows = await stored(sent.map((t) => t.bizId));
    expect(res.body.timeouts.map((t) => t.bizId)).toEqual(sent.map((t) => t.bizId));
    for (const t of res.body.timeouts) {
      const row = rows.get(t.bizId)!;
      expect({ bizId: t.bizId, id: t.id, dueAt: t.dueAt, kind: t.kind }).toEqual({ bizId: t.bizId, id: row.id, dueAt: row.dueAt, kind: KIND });
    }
    const by = new Map(res.body.timeouts.map((t) => [t.bizId, t]));
    expect(by.get('r-moved')).toMatchObject({ created: false, dueAt: '2031-05-06T05:08:09.123Z' });
    expect(by.get('r-held')).toMatchObject({ created: false, id: heldBefore.id, dueAt: heldBefore.dueAt });
    expect(rows.get('r-held')!.state).toBe('dispatched');
    expect(by.get('r-a')).toMatchObject({ created: true, dueAt: '2030-01-01T00:00:00.000Z' });
    expect(by.get('r-old')).toMatchObject({ created: true, dueAt: '1969-12-31T23:59:59.999Z' });
    expect(by.get('r-year0')).toMatchObject({ created: true, dueAt: '0000-01-01T00:00:00.000Z' });
    expect(by.get('r-\ud83d\ude00')).toMatchObject({ created: true });
    // Delays on the database clock: now() of the statement, at or after the one read before it.
    const z = Date.parse(by.get('r-z')!.dueAt) - 60_000;
    expect(z).toBeGreaterThanOrEqual(clock[0]!.now.getTime());
    expect(Date.parse(by.get('r-m')!.dueAt)).toBe(z);
    // A payload of null is kept as JSON null; none as SQL NULL.
    const { rows: payloads } = await pool.query<{ biz_id: string; payload: unknown; none: boolean }>(
      `SELECT biz_id, payload, payload IS NULL AS none FROM timeout_center.timeouts WHERE kind = $1 AND biz_id IN ('r-a', 'r-m', 'r-z') ORDER BY biz_id`,
      [KIND],
    );
    expect(payloads).toEqual([
      { biz_id: 'r-a', payload: { amount: 3 }, none: false },
      { biz_id: 'r-m', payload: null, none: false },
      { biz_id: 'r-z', payload: null, none: true },
    ]);
  });

  it('checks each kind at the first row that names it: the error names that row, after rows of kinds already checked', async () => {
    const rows = (n: number, kind = KIND) => Array.from({ length: n }, (_, i) => ({ kind, bizId: `k-${kind}-${i}`, delayMs: 1000 }));
    const unknown = await batch([...rows(3), { kind: 'order.nope', bizId: 'k-x', delayMs: 1 }, ...rows(2, 'order.nope')]);
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ code: 'unknown_kind', field: 'timeouts.3.kind' });
    const forbidden = await batch([...rows(3), { kind: 'order.other', bizId: 'k-y', delayMs: 1 }], NARROW);
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error).toMatchObject({ code: 'forbidden', field: 'timeouts.3.kind' });
    const twice = await batch([...rows(3), { kind: 'order.other', bizId: 'k-0', delayMs: 1 }, { kind: 'order.other', bizId: 'k-0', delayMs: 2 }]);
    expect(twice.status).toBe(400);
    expect(twice.body.error).toMatchObject({ code: 'duplicate_in_batch', field: 'timeouts.4.bizId' });
    // A lone surrogate is no character PostgreSQL stores (test/api/api-input-strings.test.ts has them all).
    const lone = await batch([
      { kind: KIND, bizId: 'k-\ufffd', delayMs: 1 },
      { kind: KIND, bizId: 'k-\ud800', delayMs: 1 },
    ]);
    expect(lone.status).toBe(400);
    expect(lone.body.error).toMatchObject({ code: 'invalid_request', field: 'timeouts.1.bizId' });
    expect((await pool.query(`SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE biz_id LIKE 'k-%'`)).rows[0].n).toBe(0);
  });

  it('two batches over the same timeouts in opposite orders, sent at once, both succeed (no deadlock), again and again', async () => {
    const ids = Array.from({ length: 2000 }, (_, i) => `dl-${i}`);
    for (let round = 0; round < 6; round += 1) {
      const forward = ids.map((bizId) => ({ kind: KIND, bizId, delayMs: 3_600_000 + round }));
      const backward = [...forward].reverse().map((t) => ({ ...t, delayMs: t.delayMs + 1 }));
      const [a, b] = await Promise.all([batch(forward), batch(backward)]);
      expect([a.status, b.status, a.body.error, b.body.error]).toEqual([200, 200, undefined, undefined]);
      expect([a.body.count, b.body.count]).toEqual([2000, 2000]);
    }
    expect((await pool.query(`SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE biz_id LIKE 'dl-%'`)).rows[0].n).toBe(2000);
  });
});
