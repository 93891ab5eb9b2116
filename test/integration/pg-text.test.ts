// The shard arrays' text forms (src/db/pg-text.ts): what arrayLiteral writes, PostgreSQL reads as
// the same items; what PostgreSQL writes, the fast parsers read as pg's own parsers do.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { arrayLiteral, parseFloat8Array, parseInt8Array, parseJsonbArray, parseTextArray } from '../../src/db/pg-text.js';
import { ADMIN_DATABASE_URL } from '../helpers/services.js';

const AWKWARD = [
  '',
  'NULL',
  'null',
  'Null',
  'a b',
  'a,b',
  '{x}',
  'a"b',
  'a\\b',
  '\\',
  '"',
  ' lead',
  'trail ',
  'tab\there',
  'line\nbreak',
  'ünï',
  '名前',
  '1e3',
  '-0',
];
const PLAIN = ['1', '42', 'order-7', 'o:9.1', 'ABC_def', '+1', '2026-11-26T10:00:00Z'];

let pool: pg.Pool;
beforeAll(() => {
  pool = new pg.Pool({ connectionString: ADMIN_DATABASE_URL, max: 1 });
});
afterAll(async () => {
  await pool.end();
});

/** PostgreSQL's reading of a literal, as JSON (no client-side array parsing involved). */
async function asRead(literal: string, type: string): Promise<unknown> {
  const { rows } = await pool.query<{ j: unknown }>(`SELECT to_json($1::${type}) AS j`, [literal]);
  return rows[0]!.j;
}

/** PostgreSQL's own text form of the items, as the claim's arrays arrive. */
async function asWritten(items: unknown[], type: string): Promise<string> {
  const { rows } = await pool.query<{ t: string }>(
    `SELECT coalesce((SELECT array_agg(x) FROM json_array_elements_text($1::json) x), '{}')::${type}::text AS t`,
    [JSON.stringify(items)],
  );
  return rows[0]!.t;
}

describe('arrayLiteral', () => {
  it('writes plain items as they are and quotes only those PostgreSQL would read otherwise', async () => {
    expect(arrayLiteral(PLAIN)).toBe(`{${PLAIN.join(',')}}`);
    expect(arrayLiteral([])).toBe('{}');
    for (const items of [PLAIN, AWKWARD, [...PLAIN, ...AWKWARD], ['x'], ['']]) expect(await asRead(arrayLiteral(items), 'text[]')).toEqual(items);
  });

  it('writes numbers and booleans for bigint[] and boolean[] parameters', async () => {
    expect(await asRead(arrayLiteral([1, 2, 9007199254740991]), 'bigint[]')).toEqual([1, 2, 9007199254740991]);
    expect(await asRead(arrayLiteral([true, false]), 'boolean[]')).toEqual([true, false]);
    expect(await asRead(arrayLiteral([0.5, Number.POSITIVE_INFINITY]), 'float8[]')).toEqual([0.5, 'Infinity']);
  });
});

describe('the array parsers', () => {
  it('read text[] as pg does, quoted or not', async () => {
    for (const items of [PLAIN, AWKWARD, [...PLAIN, ...AWKWARD], [], ['']]) {
      const text = await asWritten(items, 'text[]');
      expect(parseTextArray(text)).toEqual(items);
    }
    expect(parseTextArray('{a,NULL,b}')).toEqual(['a', null, 'b']);
  });

  it('read bigint[], float8[] and jsonb[]', async () => {
    expect(parseInt8Array(await asWritten(['1', '-5', '9223372036854775807'], 'bigint[]'))).toEqual(['1', '-5', '9223372036854775807']);
    expect(parseFloat8Array(await asWritten(['0.25', '-3', '1e-7', 'Infinity'], 'float8[]'))).toEqual([0.25, -3, 1e-7, Infinity]);
    const { rows } = await pool.query<{ t: string }>(`SELECT ARRAY[NULL, '1', 'true', 'null', '"s, t"', '{"a": [1, 2]}']::jsonb[]::text AS t`);
    expect(parseJsonbArray(rows[0]!.t)).toEqual([null, 1, true, null, 's, t', { a: [1, 2] }]);
    expect(parseJsonbArray('{NULL,NULL}')).toEqual([null, null]);
  });
});
