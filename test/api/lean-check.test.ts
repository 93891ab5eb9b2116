// The lean check (src/api/lean-check.ts) against zod itself, on every schema the API validates or
// answers with: on random and edge-case values, OK must be a value zod accepts with itself as the
// output, FAIL one zod refuses; and on the schemas' common inputs it must say OK (else it saves
// nothing). The server runs zod on anything but OK, so these two rules are all it may break.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FAIL, leanCheck, OK, UNSURE } from '../../src/api/lean-check.js';
import * as schemas from '../../src/api/schemas.js';

// A small deterministic generator (the same cases every run).
let seed = 42;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

const STRINGS = [
  '',
  'a',
  'order.unpaid',
  'Order.Unpaid',
  'order unpaid',
  '42',
  'x'.repeat(100),
  'x'.repeat(101),
  'x'.repeat(200),
  'x'.repeat(201),
  '😀'.repeat(100), // 200 UTF-16 units, 100 code points
  '😀'.repeat(101),
  '😀',
  '\ud83d', // a lone surrogate
  'a\u0000b', // NUL: JSON carries it, PostgreSQL refuses it
  '\udc00\ud83d', // a pair the wrong way round
  'all-or-nothing',
  'pending',
  'applied',
  'forbidden',
  '2026-01-01T12:00:00Z',
  '2026-01-01T12:00:00.123456+02:00',
  '2026-02-29T00:00:00Z',
  '2028-02-29T00:00:00Z',
  '10000-01-01T00:00:00Z',
  '2026-01-01T12:00:00',
  '2026-01-01 12:00:00Z',
  'ok',
];
const NUMBERS = [0, 1, -1, 0.5, 42, 86_400_000, 3153600000000, 3153600000001, Number.MAX_SAFE_INTEGER, 2 ** 53, -0, NaN, Infinity, 1e300];
const KEYS = [
  'kind',
  'bizId',
  'dueAt',
  'delayMs',
  'payload',
  'timeouts',
  'id',
  'created',
  'transaction',
  'count',
  'status',
  'error',
  'code',
  'message',
  'field',
  'outcome',
  'extra',
];

function randomValue(depth: number): unknown {
  const r = rand();
  if (r < 0.25) return pick(STRINGS);
  if (r < 0.45) return pick(NUMBERS);
  if (r < 0.5) return pick([true, false, null, undefined]);
  if (depth <= 0) return pick(STRINGS);
  if (r < 0.6) return Array.from({ length: Math.floor(rand() * 3) }, () => randomValue(depth - 1));
  const o: Record<string, unknown> = {};
  for (let i = Math.floor(rand() * 5); i > 0; i -= 1) o[pick(KEYS)] = randomValue(depth - 1);
  return o;
}

/** A valid value of the schema changed in one place (or not at all). */
function mutate(value: unknown): unknown {
  if (rand() < 0.3) return value;
  if (Array.isArray(value)) {
    const copy = value.map((v) => (rand() < 0.2 ? mutate(v) : v));
    if (rand() < 0.2) copy.push(randomValue(2));
    return copy;
  }
  if (typeof value === 'object' && value !== null) {
    const copy: Record<string, unknown> = { ...(value as Record<string, unknown>) };
    const keys = Object.keys(copy);
    const r = rand();
    if (r < 0.2 && keys.length > 0) delete copy[pick(keys)];
    else if (r < 0.4) copy[pick(KEYS)] = randomValue(2);
    else if (keys.length > 0) {
      const k = pick(keys);
      copy[k] = rand() < 0.5 ? mutate(copy[k]) : randomValue(2);
    }
    return copy;
  }
  return randomValue(1);
}

const one = (i: number) =>
  i % 3 === 0
    ? { kind: 'order.unpaid', bizId: String(i), delayMs: 60_000 }
    : i % 3 === 1
      ? { kind: 'order.unpaid', bizId: String(i), dueAt: '2026-12-01T00:00:00.000Z', payload: { amount: i } }
      : { kind: 'k', bizId: 'ü'.repeat(3), delayMs: 0, payload: null };

// Values each schema should find OK (the common case), and the schemas they belong to.
const valid: [string, z.core.$ZodType, unknown[]][] = [
  ['scheduleRequest', schemas.scheduleRequest, [one(0), one(1), one(2)]],
  ['batchRequest', schemas.batchRequest, [{ timeouts: [one(0), one(1), one(2)] }, { timeouts: Array.from({ length: 5000 }, (_, i) => one(i)) }]],
  ['rescheduleRequest', schemas.rescheduleRequest, [{ dueAt: '2026-12-01T00:00:00Z' }, { delayMs: 5 }]],
  ['timeoutParams', schemas.timeoutParams, [{ kind: 'order.unpaid', bizId: '7' }]],
  ['scheduledTimeout', schemas.scheduledTimeout, [{ id: 1, kind: 'order.unpaid', bizId: '7', dueAt: '2026-12-01T00:00:00.000Z', created: true }]],
  [
    'batchResponse',
    schemas.batchResponse,
    [
      {
        transaction: 'all-or-nothing',
        count: 2,
        created: 1,
        timeouts: [
          { id: 1, kind: 'order.unpaid', bizId: '7', dueAt: '2026-12-01T00:00:00.000Z', created: true },
          { id: 2, kind: 'order.unpaid', bizId: '8', dueAt: '2026-12-01T00:00:00.000Z', created: false },
        ],
      },
    ],
  ],
  [
    'timeoutView',
    schemas.timeoutView,
    [
      {
        id: 3,
        kind: 'order.unpaid',
        bizId: '9',
        state: 'done',
        outcome: 'applied',
        dueAt: '2026-12-01T00:00:00.000Z',
        attempts: 1,
        lastError: null,
        shardId: 4,
        scanId: 5,
        store: null,
        createdAt: '2026-12-01T00:00:00.000Z',
        finishedAt: null,
      },
    ],
  ],
  ['settleResponse', schemas.settleResponse, [{ outcome: 'applied' }, { outcome: 'busy', detail: 'a worker holds it', state: 'dispatched', shardId: 3 }]],
  ['cancelResponse', schemas.cancelResponse, [{ cancelled: true }]],
  ['rescheduleResponse', schemas.rescheduleResponse, [{ rescheduled: false }]],
  ['errorResponse', schemas.errorResponse, [{ error: { code: 'forbidden', message: 'no' } }, { error: { code: 'not_found', message: 'no', field: 'kind' } }]],
  ['healthResponse', schemas.healthResponse, [{ status: 'ok' }]],
];

const zodAccepts = (schema: z.core.$ZodType, v: unknown) => z.safeParse(schema, v);
const zodEncodes = (schema: z.core.$ZodType, v: unknown) => z.safeEncode(schema, v as never);

describe('lean check', () => {
  it.each(valid)('%s: compiled, and OK on the common values', (_name, schema, values) => {
    const lean = leanCheck(schema);
    expect(lean).not.toBeNull();
    for (const v of values) expect(lean!(v)).toBe(OK);
  });

  it.each(valid)('%s: OK only where zod accepts the value as it is, FAIL only where zod refuses it (random and mutated values)', (_name, schema, values) => {
    const lean = leanCheck(schema)!;
    const verdicts = { [OK]: 0, [FAIL]: 0, [UNSURE]: 0 };
    const inputs: unknown[] = [];
    const small = values.filter((v) => JSON.stringify(v).length < 10_000);
    for (let i = 0; i < 3000; i += 1) inputs.push(i % 2 === 0 ? mutate(pick(small)) : randomValue(3));
    for (const v of inputs) {
      const verdict = lean(v);
      verdicts[verdict] += 1;
      const parsed = zodAccepts(schema, v);
      const encoded = zodEncodes(schema, v);
      if (verdict === OK) {
        expect(parsed.success, JSON.stringify(v)).toBe(true);
        expect(parsed.data).toStrictEqual(v);
        expect(encoded.success).toBe(true);
        expect(JSON.parse(JSON.stringify(encoded.data))).toStrictEqual(JSON.parse(JSON.stringify(v)));
      } else if (verdict === FAIL) {
        expect(parsed.success, JSON.stringify(v)).toBe(false);
        expect(encoded.success, JSON.stringify(v)).toBe(false);
      }
    }
    // Both verdicts are reached: the cases exercise the check, not only zod.
    expect(verdicts[OK]).toBeGreaterThan(0);
    expect(verdicts[FAIL]).toBeGreaterThan(0);
  });

  it('lengths are counted as zod counts them (code points, a surrogate pair is one)', () => {
    const lean = leanCheck(schemas.timeoutParams)!;
    const emoji = { kind: 'k', bizId: '😀'.repeat(150) }; // 300 UTF-16 units, 150 code points: zod accepts it
    expect(zodAccepts(schemas.timeoutParams, emoji).success).toBe(true);
    expect(lean(emoji)).toBe(OK);
    const long = { kind: 'k', bizId: `${'😀'.repeat(150)}${'x'.repeat(51)}` }; // 201 code points
    expect(zodAccepts(schemas.timeoutParams, long).success).toBe(false);
    expect(lean(long)).toBe(FAIL);
    const lone = { kind: 'k', bizId: '\ud83d' }; // a lone surrogate: no character PostgreSQL stores
    expect(zodAccepts(schemas.timeoutParams, lone).success).toBe(false);
    expect(lean(lone)).toBe(FAIL);
    expect(lean({ kind: 'k', bizId: '' })).toBe(FAIL);
    const min2 = leanCheck(z.string().min(2))!;
    expect([min2('😀'), z.safeParse(z.string().min(2), '😀').success]).toEqual([FAIL, false]);
    expect([min2('😀x'), z.safeParse(z.string().min(2), '😀x').success]).toEqual([OK, true]);
  });

  it("a payload PostgreSQL cannot store is FAIL, as zod's check says, with the path inside it (predicateCheck)", () => {
    const lean = leanCheck(schemas.scheduleRequest)!;
    const base = { kind: 'order.unpaid', bizId: '1', delayMs: 5 };
    for (const payload of [{ a: [1, { b: 'x\u0000' }] }, { ['k\ud800']: 1 }, '\udfff', JSON.parse('['.repeat(65) + ']'.repeat(65)) as unknown]) {
      expect(lean({ ...base, payload })).toBe(FAIL);
      expect(zodAccepts(schemas.scheduleRequest, { ...base, payload }).success).toBe(false);
    }
    // zod's issue (in the union's branch) names the string inside the payload.
    const issues = JSON.stringify(z.safeParse(schemas.scheduleRequest, { ...base, payload: { a: [1, { b: 'x\u0000' }] } }).error!.issues);
    expect(issues).toContain('"path":["payload","a",1,"b"]');
    const fine = { ...base, payload: { a: ['\ud83d\ude00', JSON.parse('['.repeat(62) + ']'.repeat(62)) as unknown] } }; // 64 levels in all
    expect(lean(fine)).toBe(OK);
  });

  it('a schema with something it does not know is left to zod (null)', () => {
    expect(leanCheck(z.string().transform((s) => s.length))).toBeNull();
    expect(leanCheck(z.object({ a: z.string() }).refine(() => true))).toBeNull();
    expect(leanCheck(z.record(z.string(), z.unknown()))).toBeNull();
    expect(leanCheck(z.string().email())).toBeNull();
    expect(leanCheck(z.object({ a: z.string().default('x') }))).toBeNull();
    expect(leanCheck(z.number().multipleOf(5))).toBeNull();
  });

  it('an open object with a key it does not name is not OK (zod drops the key)', () => {
    const lean = leanCheck(schemas.scheduledTimeout)!;
    expect(lean({ id: 1, kind: 'k', bizId: 'b', dueAt: 'x', created: true, extra: 1 })).toBe(UNSURE);
  });
});
