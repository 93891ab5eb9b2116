// A SQL handler's returned ids come back aggregated where the statement runs (handlers.ts
// aggregatingReturned: one row, the ids as one array literal) and are sent on to the marker and
// the record as that literal (pg-text.ts literalOf). The aggregated form returns exactly what the
// statement returns, for plain and awkward ids, and a statement it cannot wrap runs as written.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { literalOf, parseTextArray, withLiteral } from '../../src/db/pg-text.js';
import { statementValues } from '../../src/db/queries.js';
import { aggregatingReturned } from '../../src/worker/handlers.js';
import { ADMIN_DATABASE_URL } from '../helpers/services.js';

let client: pg.Client;
beforeAll(async () => {
  client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await client.connect();
  await client.query(`CREATE TEMP TABLE orders (id text PRIMARY KEY, status text NOT NULL)`);
});
afterAll(async () => {
  await client.end();
});

const IDS = ['1', '42', 'a b', 'a,b', 'q"uote', 'NULL', '', 'ünï'];

describe('aggregatingReturned', () => {
  it('wraps a statement so its returned ids come back as one literal, the same ids', async () => {
    for (const sql of [
      `UPDATE orders SET status = 'closed' WHERE id = ANY($1::text[]) AND status = 'unpaid' RETURNING id`,
      `UPDATE orders SET status = 'closed' WHERE id = ANY($1::text[]) AND status = 'unpaid' RETURNING id, status;`,
      `UPDATE orders SET status = 'closed' WHERE id = ANY($1::text[]) AND status = 'unpaid' RETURNING id -- closed ones`,
      `/* close */ DELETE FROM orders WHERE id = ANY($1::text[]) AND status = 'unpaid' RETURNING id`,
      `UPDATE orders SET status = 'closed;' WHERE id = ANY($1::text[]) AND status = 'unpaid' RETURNING id; -- it's done`,
    ]) {
      await client.query('BEGIN');
      await client.query(`INSERT INTO orders SELECT x, CASE WHEN x = '42' THEN 'paid' ELSE 'unpaid' END FROM unnest($1::text[]) x`, [IDS]);
      const wrapped = aggregatingReturned(sql)!;
      expect(wrapped, sql).toBeDefined();
      const { rows } = await client.query<{ applied: string }>({ text: wrapped, values: [IDS], types: { getTypeParser: () => (v: string) => v } });
      const applied = parseTextArray(rows[0]!.applied);
      await client.query('ROLLBACK');
      expect(applied.sort(), sql).toEqual(IDS.filter((id) => id !== '42').sort());
    }
  });

  it('returns an empty literal when nothing changed, and leaves a WITH statement as written', async () => {
    const { rows } = await client.query<{ applied: string }>(aggregatingReturned(`UPDATE orders SET status = 'x' WHERE false RETURNING id`)!);
    expect(rows[0]!.applied).toBe('{}');
    expect(aggregatingReturned(`WITH c AS (SELECT 1) UPDATE orders SET status = 'x' WHERE false RETURNING id`)).toBeUndefined();
    expect(aggregatingReturned(`-- lead\n  with c AS (SELECT 1) UPDATE orders SET status = 'x' RETURNING id`)).toBeUndefined();
    // two statements: run as written, so PostgreSQL refuses them as it always did
    expect(aggregatingReturned(`UPDATE orders SET status = 'x' RETURNING id; SELECT 1`)).toBeUndefined();
    expect(aggregatingReturned(`UPDATE orders SET status = 'x' RETURNING id; /* a */ SELECT 1`)).toBeUndefined();
  });
});

describe('a literal sent on as it came', () => {
  it('is what sql() sends for an array parsed from it, and nothing for an array written anew', () => {
    const ids = parseTextArray('{7,8,9}');
    expect(literalOf(ids)).toBe('{7,8,9}');
    expect(statementValues('worker/marker_insert', { shardId: 1, leaseToken: 't', ran: ids })[2]).toBe('{7,8,9}');
    expect(literalOf([...ids])).toBeUndefined();
    expect(statementValues('worker/marker_insert', { shardId: 1, leaseToken: 't', ran: ['7', 'a b'] })[2]).toBe('{7,"a b"}');
    // a quoted array is parsed by pg's parser and remembers no literal
    expect(literalOf(parseTextArray('{"a b",c}'))).toBeUndefined();
    expect(literalOf(withLiteral([1], '{1}'))).toBe('{1}');
  });
});
