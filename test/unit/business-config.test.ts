// Config of business databases and routes: what is accepted, and the errors for what is not.
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig, type ConfigInput } from '../../src/config.js';
import { routeRows } from '../../src/db/routes.js';

const SQL = "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";
type Handler = NonNullable<ConfigInput['kinds']>[string]['handler'];

function config(
  handler: Handler,
  businessDatabases: ConfigInput['businessDatabases'] = { orders_0: { url: 'postgres://a/o0' }, orders_1: { urlEnv: 'ORDERS_1_URL' } },
): ConfigInput {
  return { businessDatabases, kinds: { 'order.unpaid': { handler } } };
}

function problems(input: ConfigInput): string {
  try {
    parseConfig(input, 'x.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected the config to be refused');
}

describe('business databases in the config', () => {
  it('accepts one database, modulo, hash and ranges, and resolves urlEnv from the environment', () => {
    for (const handler of [
      { type: 'sql', sql: SQL, database: 'orders_0' },
      { type: 'sql', sql: SQL, route: { by: 'modulo', databases: ['orders_0', 'orders_1'] } },
      { type: 'sql', sql: SQL, route: { by: 'hash', databases: ['orders_0', 'orders_1'] } },
      {
        type: 'sql',
        sql: SQL,
        route: {
          by: 'range',
          ranges: [
            { from: 0, to: 1000, database: 'orders_0' },
            { from: 1000, to: 2000, database: 'orders_1' },
          ],
        },
      },
      { type: 'code', database: 'orders_1' },
    ] as Handler[]) {
      expect(() => parseConfig(config(handler))).not.toThrow();
    }
    const loaded = loadConfig({
      object: config({ type: 'sql', sql: SQL, database: 'orders_1' }),
      env: { DATABASE_URL: 'postgres://c', REDIS_URL: 'redis://r', ORDERS_1_URL: 'postgres://b/o1' },
    });
    expect(loaded.businessDatabaseUrls).toEqual({ orders_0: 'postgres://a/o0', orders_1: 'postgres://b/o1' });
    expect(loaded.businessDatabases['orders_0']?.poolSize).toBe(4);
  });

  it('names an unknown database, both database and route, a bad name, and url/urlEnv mistakes', () => {
    expect(problems(config({ type: 'sql', sql: SQL, database: 'orders_9' }))).toMatch(
      /kinds\."order\.unpaid"\.handler\.database: unknown business database "orders_9"; declared: orders_0, orders_1/,
    );
    expect(problems(config({ type: 'sql', sql: SQL, route: { by: 'modulo', databases: ['orders_0', 'nope'] } }))).toMatch(
      /handler\.route\.databases\.1: unknown business database "nope"/,
    );
    expect(problems(config({ type: 'sql', sql: SQL, database: 'orders_0', route: { by: 'hash', databases: ['orders_0'] } }))).toMatch(
      /give database or route, not both/,
    );
    expect(problems(config({ type: 'sql', sql: SQL, database: 'Orders' }, { Orders: { url: 'postgres://x' } }))).toMatch(
      /businessDatabases\.Orders: database names are lower-case/,
    );
    expect(problems(config({ type: 'sql', sql: SQL }, { orders_0: { url: 'postgres://x', urlEnv: 'X' } }))).toMatch(
      /businessDatabases\.orders_0: give exactly one of url or urlEnv/,
    );
    expect(problems(config({ type: 'sql', sql: SQL }, { orders_0: {} }))).toMatch(/give exactly one of url or urlEnv/);
    expect(() =>
      loadConfig({ object: config({ type: 'sql', sql: SQL, database: 'orders_1' }), env: { DATABASE_URL: 'postgres://c', REDIS_URL: 'redis://r' } }),
    ).toThrow(/businessDatabases\.orders_1\.urlEnv: the environment variable ORDERS_1_URL is not set/);
  });

  it('refuses empty, reversed and overlapping ranges', () => {
    const range = (ranges: { from: number; to: number; database: string }[]) => config({ type: 'sql', sql: SQL, route: { by: 'range', ranges } });
    expect(problems(range([]))).toMatch(/route\.ranges/);
    expect(problems(range([{ from: 10, to: 10, database: 'orders_0' }]))).toMatch(/ranges\.0: from \(10\) must be below to \(10\)/);
    expect(
      problems(
        range([
          { from: 0, to: 100, database: 'orders_0' },
          { from: 50, to: 200, database: 'orders_1' },
        ]),
      ),
    ).toMatch(/ranges\.1: overlaps range 0 \(\[0, 100\) -> orders_0\)/);
    expect(problems(config({ type: 'sql', sql: SQL, route: { by: 'modulo', databases: [] } }))).toMatch(/route\.databases/);
  });

  it('writes one route row per routed kind, none for the same-database path', () => {
    const c = parseConfig({
      businessDatabases: { a: { url: 'postgres://a' }, b: { url: 'postgres://b' } },
      kinds: {
        'k.same': { handler: { type: 'sql', sql: SQL } },
        'k.one': { handler: { type: 'sql', sql: SQL, database: 'b' } },
        'k.range': { handler: { type: 'sql', sql: SQL, route: { by: 'range', ranges: [{ from: -5, to: 5, database: 'a' }] } } },
      },
    });
    expect(routeRows(c.kinds)).toEqual([
      { kind: 'k.one', by: 'database', databases: ['b'], from: null, to: null },
      { kind: 'k.range', by: 'range', databases: ['a'], from: ['-5'], to: ['5'] },
    ]);
  });
});
