// Bad input gets a clear error and changes nothing: at insert (plain SQL and the TypeScript API),
// in the config file, and when PostgreSQL or Redis cannot be reached.
import { mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancel, reschedule, schedule, TimeoutInputError, UnknownKindError } from '../../src/schedule.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string>;
let configPath: string;

async function count(): Promise<number> {
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM timeout_center.all_timeouts');
  return rows[0].n;
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

beforeAll(async () => {
  db = await createTestDatabase('badinput');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  await createOrdersSchema(pool);
  configPath = writeConfig({
    redisKeyPrefix: testKeyPrefix('badinput'),
    kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } },
  });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
  const r = await runCli(['migrate'], env);
  expect(r.code, r.stderr).toBe(0);
});

afterAll(() => tearDown({ pool, db }));

describe('inserting timeouts', () => {
  it('rejects an unknown kind in plain SQL, naming the kind type and the kind, and writes nothing', async () => {
    await expect(pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unknown', '1', now())")).rejects.toMatchObject({
      code: '22P02',
      message: 'invalid input value for enum timeout_center.kind: "order.unknown"',
    });
    expect(await count()).toBe(0);
  });

  it('rejects a missing or invalid due time in plain SQL', async () => {
    await expect(pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id) VALUES ('order.unpaid', '1')")).rejects.toMatchObject({
      code: '23502',
      column: 'due_at',
    });
    await expect(
      pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '1', 'next tuesday-ish')"),
    ).rejects.toMatchObject({ code: '22007' });
    expect(await count()).toBe(0);
  });

  it('rejects a second live timeout for the same (kind, biz_id) in plain SQL; ON CONFLICT upserts', async () => {
    await pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', 'dup', now() + interval '1 hour')");
    await expect(
      pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', 'dup', now() + interval '2 hours')"),
    ).rejects.toMatchObject({ code: '23505', constraint: 'timeouts_one_live_per_biz' });
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', 'dup', now() + interval '2 hours')
                      ON CONFLICT (kind, biz_id) WHERE state IN ('pending', 'dispatched') DO UPDATE SET due_at = EXCLUDED.due_at`);
    const { rows } = await pool.query(
      "SELECT count(*)::int AS n, max(due_at) > now() + interval '90 minutes' AS moved FROM timeout_center.all_timeouts WHERE biz_id = 'dup'",
    );
    expect(rows[0]).toEqual({ n: 1, moved: true });
    await pool.query('DELETE FROM timeout_center.timeouts');
  });

  it('schedule() names the unknown kind and writes nothing', async () => {
    await expect(schedule(pool, { kind: 'order.nope', bizId: 1, delayMs: 1000 })).rejects.toThrow(UnknownKindError);
    await expect(schedule(pool, { kind: 'order.nope', bizId: 1, delayMs: 1000 })).rejects.toThrow(/unknown timeout kind "order.nope"/);
    expect(await count()).toBe(0);
  });

  it('schedule() rejects missing, invalid or double due times before touching the database', async () => {
    await expect(schedule(pool, { kind: 'order.unpaid', bizId: 1 })).rejects.toThrow(/exactly one of dueAt/);
    await expect(schedule(pool, { kind: 'order.unpaid', bizId: 1, dueAt: new Date('garbage') })).rejects.toThrow(TimeoutInputError);
    await expect(schedule(pool, { kind: 'order.unpaid', bizId: 1, delayMs: -5 })).rejects.toThrow(/delayMs must be/);
    await expect(schedule(pool, { kind: 'order.unpaid', bizId: 1, delayMs: 5, dueAt: new Date() })).rejects.toThrow(/exactly one/);
    await expect(schedule(pool, { kind: 'order.unpaid', bizId: '', delayMs: 5 })).rejects.toThrow(/bizId/);
    expect(await count()).toBe(0);
  });

  it('schedule(), cancel() and reschedule() refuse strings PostgreSQL cannot store (NUL, lone surrogates, a payload too deep) before touching the database', async () => {
    const one = { kind: 'order.unpaid', bizId: '1', delayMs: 5 };
    for (const bad of ['a\u0000b', 'a\ud800', '\udc00']) {
      await expect(schedule(pool, { ...one, bizId: bad })).rejects.toThrow(TimeoutInputError);
      await expect(schedule(pool, { ...one, kind: bad })).rejects.toThrow(TimeoutInputError);
      await expect(schedule(pool, { ...one, payload: { lines: [{ sku: bad }] } })).rejects.toThrow(
        /payload\.lines\.0\.sku holds a character PostgreSQL cannot store/,
      );
      await expect(schedule(pool, { ...one, payload: { [bad]: 1 } })).rejects.toThrow(/payload has a key that holds/);
      await expect(cancel(pool, 'order.unpaid', bad)).rejects.toThrow(TimeoutInputError);
      await expect(reschedule(pool, 'order.unpaid', bad, { delayMs: 5 })).rejects.toThrow(TimeoutInputError);
    }
    let deep: unknown = 1;
    for (let i = 0; i < 10_000; i += 1) deep = [deep];
    await expect(schedule(pool, { ...one, payload: deep })).rejects.toThrow(/nested deeper than 64 levels/);
    expect(await count()).toBe(0);
  });

  it('schedule() is idempotent per live (kind, bizId); cancel and reschedule work inside a transaction', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const first = await schedule(client, { kind: 'order.unpaid', bizId: 42, delayMs: 60_000 });
      const again = await schedule(client, { kind: 'order.unpaid', bizId: 42, delayMs: 120_000 });
      expect(first.created).toBe(true);
      expect(again).toMatchObject({ id: first.id, created: false });
      expect(again.dueAt.getTime()).toBeGreaterThan(first.dueAt.getTime());
      expect(await reschedule(client, 'order.unpaid', 42, { delayMs: 5_000 })).toBe(true);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await count()).toBe(0); // rolled back with the caller's transaction
    await schedule(pool, { kind: 'order.unpaid', bizId: 43, delayMs: 60_000 });
    expect(await cancel(pool, 'order.unpaid', 43)).toBe(true);
    expect(await cancel(pool, 'order.unpaid', 43)).toBe(false);
    expect(await reschedule(pool, 'order.unpaid', 43, { delayMs: 1 })).toBe(false);
    await pool.query('DELETE FROM timeout_center.timeouts');
  });

  it("cancel() and reschedule() of an unknown kind find nothing, and the caller's transaction goes on", async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      expect(await cancel(client, 'order.nope', 1)).toBe(false);
      expect(await reschedule(client, 'order.nope', 1, { delayMs: 5 })).toBe(false);
      expect((await schedule(client, { kind: 'order.unpaid', bizId: 44, delayMs: 60_000 })).created).toBe(true);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await count()).toBe(0);
  });

  it('a kind inserted into timeout_center.kinds by hand is a kind once committed, in name order; one with timeouts cannot be deleted', async () => {
    await pool.query("INSERT INTO timeout_center.kinds (kind) VALUES ('zz.by_hand'), ('aa.by_hand')");
    // A value typed varchar or text (as some drivers bind strings) is taken by INSERT too.
    await pool.query(
      "INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1::varchar, '1', now() + interval '1 hour'), ($2::text, '1', now() + interval '1 hour')",
      ['zz.by_hand', 'aa.by_hand'],
    );
    const { rows } = await pool.query('SELECT kind FROM timeout_center.timeouts ORDER BY kind');
    expect(rows.map((r) => r.kind)).toEqual(['aa.by_hand', 'zz.by_hand']);
    const labels = await pool.query('SELECT enum_range(NULL::timeout_center.kind)::text[] AS l');
    expect(labels.rows[0].l).toEqual(['aa.by_hand', 'order.unpaid', 'zz.by_hand']);
    await expect(pool.query("DELETE FROM timeout_center.kinds WHERE kind = 'zz.by_hand'")).rejects.toMatchObject({
      code: '23503',
      constraint: 'timeouts_kind_fkey',
    });
    await pool.query('DELETE FROM timeout_center.timeouts');
    await pool.query("DELETE FROM timeout_center.kinds WHERE kind IN ('zz.by_hand', 'aa.by_hand')");
  });
});

describe('the CLI', () => {
  function configFile(name: string, text: string): string {
    const dir = mkdtempSync(join(tmpdir(), 'tc-bad-'));
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  }

  async function kindsSnapshot(): Promise<string> {
    const { rows } = await pool.query('SELECT kind, shard_size FROM timeout_center.kinds ORDER BY kind');
    return JSON.stringify(rows);
  }

  it('names the bad field of a malformed config and changes nothing', async () => {
    const before = await kindsSnapshot();
    const cases: [string, string, RegExp][] = [
      ['bad.yaml', 'kinds:\n  order.unpaid: [unclosed', /not valid YAML/],
      ['bad.json', '{"kinds": ', /not valid JSON/],
      ['size.yaml', `kinds:\n  order.unpaid:\n    shardSize: 0\n    handler: { type: sql, sql: "${CLOSE_SQL}" }\n`, /kinds\."order\.unpaid"\.shardSize/],
      ['typo.yaml', `kinds:\n  order.unpaid:\n    shardSise: 10\n    handler: { type: sql, sql: "${CLOSE_SQL}" }\n`, /shardSise/],
      [
        'noreturn.yaml',
        `kinds:\n  order.unpaid:\n    handler: { type: sql, sql: "UPDATE orders SET status = 'x' WHERE id = ANY($1)" }\n`,
        /handler\.sql: the statement must end with RETURNING/,
      ],
      ['badname.yaml', `kinds:\n  Order Unpaid:\n    handler: { type: sql, sql: "${CLOSE_SQL}" }\n`, /kind names are lower-case/],
      ['nokinds.yaml', 'kinds: {}\n', /declare at least one kind/],
    ];
    for (const [name, text, expected] of cases) {
      const r = await runCli(['migrate', '--config', configFile(name, text)], { ...env, TIMEOUT_CENTER_CONFIG: undefined });
      expect(r.code, `${name}: ${r.stderr}`).toBe(2);
      expect(r.stderr, name).toMatch(expected);
      expect(r.stderr, name).toMatch(/^timeout-center: invalid configuration in /);
    }
    // A command-line flag meets the same schema as the file.
    const flag = await runCli(
      ['worker', '--concurrency', '1000', '--config', configFile('ok.yaml', `kinds:\n  order.unpaid:\n    handler: { type: sql, sql: "${CLOSE_SQL}" }\n`)],
      env,
    );
    expect(flag.code, flag.stderr).toBe(2);
    expect(flag.stderr).toMatch(/worker\.concurrency: /);
    const missing = await runCli(['worker', '--config', '/nonexistent/tc.yaml'], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/file not found/);
    expect(await kindsSnapshot()).toBe(before);
  });

  it('rejects a handler statement PostgreSQL cannot run, naming the kind, before taking work', async () => {
    const path = writeConfig({
      redisKeyPrefix: testKeyPrefix('badsql'),
      kinds: { 'order.unpaid': { handler: { type: 'sql', sql: 'UPDATE orderz SET status = 1 WHERE id = ANY($1) RETURNING id' } } },
    });
    const r = await runCli(['worker'], { ...env, TIMEOUT_CENTER_CONFIG: path });
    // Bad input (exit 2), not a bug (4): the line says what to fix.
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/kinds\."order\.unpaid"\.handler\.sql: PostgreSQL rejects the statement: relation "orderz" does not exist/);
    expect(r.stderr).toMatch(/fix the statement in the config, or create what it names/);
    expect(r.stderr).not.toMatch(/unexpected error/);
  });

  it('rejects a code handler whose module cannot be loaded or lacks its export, naming the kind, exit 2', async () => {
    const missing = writeConfig({
      redisKeyPrefix: testKeyPrefix('badcode'),
      kinds: { 'order.unpaid': { handler: { type: 'code', module: './no-such-handler.js' } } },
    });
    const r = await runCli(['worker'], { ...env, TIMEOUT_CENTER_CONFIG: missing });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/kinds\."order\.unpaid"\.handler\.module: cannot load \.\/no-such-handler\.js/);
    const noExport = writeConfig({
      redisKeyPrefix: testKeyPrefix('badcode'),
      kinds: { 'order.unpaid': { handler: { type: 'code', module: './handler.mjs', export: 'closeOrders' } } },
    });
    writeFileSync(join(dirname(noExport), 'handler.mjs'), 'export const other = 1;\n');
    const e = await runCli(['worker'], { ...env, TIMEOUT_CENTER_CONFIG: noExport });
    expect(e.code, e.stderr).toBe(2);
    expect(e.stderr).toMatch(/kinds\."order\.unpaid"\.handler: \.\/handler\.mjs has no function export "closeOrders"/);
  });

  it('says which server is unreachable and how to fix it', async () => {
    const port = await freePort();
    // Unavailable, nothing done: exit 3 (docs/reference/cli.md "Exit codes").
    const noPg = await runCli(['coordinator'], { ...env, DATABASE_URL: `postgres://postgres:secret@127.0.0.1:${port}/x` });
    expect(noPg.code).toBe(3);
    expect(noPg.stderr).toMatch(new RegExp(`cannot reach PostgreSQL at postgres://postgres:\\*\\*\\*@127.0.0.1:${port}/x: .*ECONNREFUSED.*DATABASE_URL`));
    const noRedis = await runCli(['worker'], { ...env, REDIS_URL: `redis://127.0.0.1:${port}` });
    expect(noRedis.code).toBe(3);
    expect(noRedis.stderr).toMatch(new RegExp(`cannot reach Redis at redis://127.0.0.1:${port}: .*REDIS_URL`));
    const noUrl = await runCli(['worker'], { ...env, DATABASE_URL: '' });
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toMatch(/databaseUrl: not set: set DATABASE_URL/);
    expect(await count()).toBe(0);
  });

  it('explains a database that was never migrated', async () => {
    const fresh = await createTestDatabase('unmigrated', { empty: true });
    try {
      const r = await runCli(['coordinator'], { ...env, DATABASE_URL: fresh.url });
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/schema is missing.*run `timeout-center migrate` first/);
    } finally {
      await fresh.drop();
    }
  });
});
