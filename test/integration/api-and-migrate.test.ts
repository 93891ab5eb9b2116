// The business API inside a kysely transaction, migrations started by several processes at once,
// and the handler time limit.
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/observability/logger.js';
import { startRuntime } from '../../src/runtime.js';
import { cancel, schedule } from '../../src/schedule.js';
import { writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

let db: TestDatabase;
let pool: pg.Pool;
let env: Record<string, string>;
const kinds = { 'order.unpaid': { handler: { type: 'sql' as const, sql: 'SELECT x FROM unnest($1::text[]) x' } } };

beforeAll(async () => {
  db = await createTestDatabase('api', { empty: true }); // its test migrates from five processes at once
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
  env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: writeConfig({ kinds }) };
});

afterAll(() => tearDown({ pool, db }));

describe('migrations', () => {
  it('apply once when five processes start them at the same moment', async () => {
    const results = await Promise.all(Array.from({ length: 5 }, () => runCli(['migrate'], env)));
    for (const r of results) expect(r.code, r.stderr).toBe(0);
    const applied = results.flatMap((r) => r.lines.filter((l) => l.msg === 'applied migration').map((l) => l['migration']));
    const { rows } = await pool.query('SELECT name FROM timeout_center.migrations ORDER BY version');
    expect(applied.sort()).toEqual(rows.map((r) => r.name).sort()); // each applied by exactly one process
    expect(rows[0].name).toBe('0001_init');
  });
});

describe('business API in a kysely transaction', () => {
  it('commits and rolls back with the caller', async () => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const kdb = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }) });
    try {
      await kdb.transaction().execute(async (trx) => {
        await schedule(trx, { kind: 'order.unpaid', bizId: 'k-1', delayMs: 60_000, payload: { total: 12.5 } });
      });
      await expect(
        kdb.transaction().execute(async (trx) => {
          await schedule(trx, { kind: 'order.unpaid', bizId: 'k-2', delayMs: 60_000 });
          throw new Error('order insert failed');
        }),
      ).rejects.toThrow('order insert failed');
      const { rows } = await sql<{ biz_id: string; payload: unknown; in_a_minute: boolean }>`
        SELECT biz_id, payload, due_at BETWEEN now() + interval '50 s' AND now() + interval '70 s' AS in_a_minute
          FROM timeout_center.all_timeouts ORDER BY id`.execute(kdb);
      expect(rows).toEqual([{ biz_id: 'k-1', payload: { total: 12.5 }, in_a_minute: true }]);
      expect(await kdb.transaction().execute((trx) => cancel(trx, 'order.unpaid', 'k-1'))).toBe(true);
    } finally {
      await kdb.destroy();
    }
  });
});

describe('handler time limit', () => {
  it('stops a handler that runs past timeLimitMs and records why', async () => {
    const config = loadConfig({
      object: {
        redisKeyPrefix: testKeyPrefix('timelimit'),
        logLevel: 'silent',
        kinds: {
          'slow.kind': { shardSize: 1, maxAttempts: 1, timeLimitMs: 300, handler: { type: 'sql', sql: 'SELECT x FROM unnest($1::text[]) x, pg_sleep(2)' } },
          'slow.code': { shardSize: 1, maxAttempts: 1, timeLimitMs: 300, handler: { type: 'code' } },
        },
      },
      env: { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL },
    });
    await runCli(['migrate', '--schema-only'], env);
    const runtime = await startRuntime({
      config,
      logger: createLogger('silent'),
      coordinator: true,
      worker: true,
      configureWorker: (w) => w.registerHandler('slow.code', () => new Promise((r) => setTimeout(() => r([]), 5000))),
    });
    try {
      await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('slow.kind', 's1', now()), ('slow.code', 'c1', now())`);
      const deadline = Date.now() + 20_000;
      let rows: { kind: string; state: string; last_error: string | null }[] = [];
      while (Date.now() < deadline) {
        ({ rows } = await pool.query("SELECT kind, state, last_error FROM timeout_center.all_timeouts WHERE kind LIKE 'slow.%' ORDER BY kind"));
        if (rows.length === 2 && rows[1]!.state === 'failed' && rows[0]!.last_error) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      // A code handler runs on the external path, where a time limit is a batch-level failure:
      // the shard is retried later (the attempt not counted) and never fails the timeout for good.
      expect(rows).toEqual([
        { kind: 'slow.code', state: 'pending', last_error: 'handler of slow.code ran past its 300 ms time limit; its connection was destroyed' },
        // PostgreSQL's statement_timeout cancels it at the limit; on a loaded box the worker's own
        // timer (the limit + 50 ms) may fire before the cancel's error arrives. Either stops it.
        {
          kind: 'slow.kind',
          state: 'failed',
          last_error: expect.stringMatching(/57014: canceling statement due to statement timeout|handler of slow\.kind ran past its 300 ms time limit/),
        },
      ]);
    } finally {
      await runtime.stop();
    }
  });
});
