// The routing rule in SQL (timeout_center.target_of): the map and the external claim place every
// biz_id with it, so it must agree with the documented rule, stay stable, and name what it cannot
// place.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { syncKinds } from '../../src/db/kinds.js';
import { migrate } from '../../src/db/migrate.js';
import { syncRoutes } from '../../src/db/routes.js';
import { createLogger } from '../../src/observability/logger.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const SQL = "UPDATE orders SET status = 'closed' WHERE id = ANY($1) RETURNING id";
let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase('routing');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  await migrate(pool, createLogger('silent'));
  const config = parseConfig({
    businessDatabases: { a: { url: 'postgres://a' }, b: { url: 'postgres://b' }, c: { url: 'postgres://c' } },
    kinds: {
      'k.mod': { handler: { type: 'sql', sql: SQL, route: { by: 'modulo', databases: ['a', 'b', 'c'] } } },
      'k.hash': { handler: { type: 'sql', sql: SQL, route: { by: 'hash', databases: ['a', 'b'] } } },
      'k.range': {
        handler: {
          type: 'sql',
          sql: SQL,
          route: {
            by: 'range',
            ranges: [
              { from: 0, to: 100, database: 'a' },
              { from: 100, to: 1000, database: 'b' },
            ],
          },
        },
      },
      'k.one': { handler: { type: 'sql', sql: SQL, database: 'c' } },
      'k.same': { handler: { type: 'sql', sql: SQL } },
    },
  });
  await syncKinds(pool, config.kinds);
  await syncRoutes(pool, config.kinds);
});

afterAll(() => tearDown({ pool, db }));

async function targets(kind: string, ids: string[]): Promise<(string | null)[]> {
  const { rows } = await pool.query<{ t: string | null }>(
    'SELECT timeout_center.target_of($1, x) AS t FROM unnest($2::text[]) WITH ORDINALITY AS u (x, i) ORDER BY i',
    [kind, ids],
  );
  return rows.map((r) => r.t);
}

describe('timeout_center.target_of', () => {
  it('modulo: integer biz_id (up to 18 digits) mod n, non-negative; any other id is unroutable', async () => {
    expect(
      await targets('k.mod', ['0', '1', '2', '3', '-1', '300000000000000001', '-300000000000000001', '30000000000000000001', 'abc', '1.5', '-', '']),
    ).toEqual(['a', 'b', 'c', 'a', 'c', 'b', 'c', '-unroutable', '-unroutable', '-unroutable', '-unroutable', '-unroutable']);
  });

  it('hash: hashtextextended(biz_id, 0) mod n, the same value a service computes in SQL', async () => {
    const ids = ['order-1', 'order-2', 'x', '42'];
    const { rows } = await pool.query<{ i: number }>(
      `SELECT (((hashtextextended(x, 0) % 2) + 2) % 2)::int AS i FROM unnest($1::text[]) WITH ORDINALITY u (x, o) ORDER BY o`,
      [ids],
    );
    expect(await targets('k.hash', ids)).toEqual(rows.map((r) => ['a', 'b'][r.i]));
    // Stable: a fixed id always lands on the same database.
    expect(await targets('k.hash', ['order-1'])).toEqual(await targets('k.hash', ['order-1']));
  });

  it('range: from <= id < to; outside every range is unroutable', async () => {
    expect(await targets('k.range', ['0', '99', '100', '999', '1000', '-1'])).toEqual(['a', 'a', 'b', 'b', '-unroutable', '-unroutable']);
  });

  it('one database, and no route for the same-database path', async () => {
    expect(await targets('k.one', ['1', 'abc'])).toEqual(['c', 'c']);
    expect(await targets('k.same', ['1'])).toEqual([null]);
  });

  it('a changed config replaces the rule, and a kind that loses its route loses its row', async () => {
    const config = parseConfig({
      businessDatabases: { a: { url: 'postgres://a' }, b: { url: 'postgres://b' } },
      kinds: {
        'k.mod': { handler: { type: 'sql', sql: SQL, route: { by: 'modulo', databases: ['b', 'a'] } } },
        'k.one': { handler: { type: 'sql', sql: SQL } },
      },
    });
    await syncRoutes(pool, config.kinds);
    expect(await targets('k.mod', ['0', '1'])).toEqual(['b', 'a']);
    expect(await targets('k.one', ['1'])).toEqual([null]);
  });
});

describe('timeouts.target, stamped when a timeout is written (sql/0020)', () => {
  const stamped = async (kind: string) =>
    (
      await pool.query<{ biz_id: string; target: string | null; want: string | null }>(
        `SELECT biz_id, target, timeout_center.target_of(kind::text, biz_id) AS want FROM timeout_center.timeouts WHERE kind = $1 ORDER BY id`,
        [kind],
      )
    ).rows;

  it("equals the kind's rule for every timeout inserted, whatever the writer names; NULL for a kind without a rule", async () => {
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, target)
       SELECT k, x, now() + interval '1 hour', CASE WHEN x = '7' THEN 'made-up' END
         FROM unnest(ARRAY['k.mod', 'k.hash', 'k.range', 'k.one', 'k.same']) k, unnest(ARRAY['1', '2', '7', '150', 'abc']) x`,
    );
    for (const kind of ['k.mod', 'k.hash', 'k.range', 'k.one']) {
      const rows = await stamped(kind);
      expect(rows.length).toBe(5);
      for (const r of rows) expect(r.target, `${kind} ${r.biz_id}`).toBe(r.want);
    }
    expect((await stamped('k.same')).map((r) => r.target)).toEqual([null, null, null, null, null]);
  });

  it('a changed rule re-stamps the pending timeouts of its kind; a dropped rule clears them', async () => {
    await pool.query(`UPDATE timeout_center.kind_routes SET databases = '{c,b,a}' WHERE kind = 'k.mod'`);
    const rows = await stamped('k.mod');
    expect(rows.find((r) => r.biz_id === '1')!.target).toBe('b');
    expect(rows.find((r) => r.biz_id === '2')!.target).toBe('a');
    for (const r of rows) expect(r.target).toBe(r.want);
    // New inserts follow the new rule too (the trigger is compiled from kind_routes).
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('k.mod', '3', now() + interval '1 hour')`);
    expect((await stamped('k.mod')).find((r) => r.biz_id === '3')!.target).toBe('c');
    await pool.query(`DELETE FROM timeout_center.kind_routes WHERE kind = 'k.hash'`);
    expect((await stamped('k.hash')).every((r) => r.target === null)).toBe(true);
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('k.hash', '9', now() + interval '1 hour')`);
    expect((await stamped('k.hash')).find((r) => r.biz_id === '9')!.target).toBeNull();
  });
});
