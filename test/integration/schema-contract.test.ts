// The schema contract and the online migrate, with real processes (docs/upgrading.md):
//   - a process refuses a schema older than it needs (exit 3, naming migrate), runs on a newer one
//     that still runs its version, and refuses (or, running, stops on) one that does not;
//   - migrate refuses a step that a live older process cannot run beside, naming it, unless
//     --force;
//   - a step waits for a lock at most lock_timeout, backs off and tries again: an INSERT never
//     queues behind it for long;
//   - CREATE INDEX CONCURRENTLY cut off mid-build leaves an INVALID index that the next migrate
//     rebuilds.
import { copyFileSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS_DIR, OlderProcessesError } from '../../src/db/migrate.js';
import { liveProcesses } from '../../src/release/fleet.js';
import { VERSION } from '../../src/version.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';

const silent = pino({ level: 'silent' });
const logs: { msg: string }[] = [];
const capture = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as { msg: string }) });
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** sql/ up to `upTo` (inclusive), plus extra files: a directory of migrations for one test. */
function migrationsDir(extra: Record<string, string> = {}, upTo = Infinity): string {
  const dir = mkdtempSync(join(tmpdir(), 'tc-migrations-'));
  for (const f of readdirSync(MIGRATIONS_DIR))
    if (/^\d{4}_.*\.sql$/.test(f) && Number(f.slice(0, 4)) <= upTo) copyFileSync(join(MIGRATIONS_DIR, f), join(dir, f));
  for (const [name, sql] of Object.entries(extra)) writeFileSync(join(dir, name), sql);
  return dir;
}

const FUTURE = { '0900_future_table.sql': '-- a later release adds a table nothing older reads\nCREATE TABLE timeout_center.future_feature (id int);\n' };
const BREAKING = {
  ...FUTURE,
  '0901_breaking.sql':
    '-- tc:oldest-code 99.0.0\n-- a later release that older code cannot run beside\nALTER TABLE timeout_center.future_feature ADD COLUMN x int;\n',
};

describe('schema contract and online migrate', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let env: Record<string, string | undefined>;
  let cfg: string;

  beforeEach(async () => {
    db = await createTestDatabase('contract', { empty: true });
    pool = new pg.Pool({ connectionString: db.url, max: 6 });
    pool.on('error', () => {});
    await createOrdersSchema(pool);
    env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL };
    cfg = writeConfig({
      redisKeyPrefix: testKeyPrefix('contract'),
      kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } },
      worker: { drainTimeoutMs: 2000 },
    });
    logs.length = 0;
  });

  afterEach(async () => {
    await pool.end();
    await db.drop();
  });

  afterAll(async () => {
    expect(await killAll()).toEqual([]);
  });

  it('a process refuses a schema older than it needs, naming migrate; the schema records its contract', async () => {
    await migrate(pool, silent, migrationsDir({}, 23));
    const r = await runCli(['worker', '--config', cfg], env);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/schema is at migration 0023.*needs 00\d\d\. Run `timeout-center migrate` with this version first/);

    const m = await migrate(pool, silent);
    expect(m.oldestCode).toBe('0.1.0');
    const { rows } = await pool.query('SELECT schema_version, oldest_code, migrated_by FROM timeout_center.schema_contract');
    expect(rows).toEqual([{ schema_version: m.current, oldest_code: '0.1.0', migrated_by: VERSION }]);
  });

  it('runs on a newer schema that still runs its version; refuses, and stops on, one that does not; migrate names the live older process', async () => {
    await migrate(pool, silent, migrationsDir(FUTURE));
    const worker = spawnCli('worker', ['worker', '--config', cfg], env);
    await worker.waitForMsg('worker started', 30_000);
    const newer = worker.lines.find((l) => /newer than this build's/.test(String(l.msg)));
    expect(newer?.msg).toMatch(/migration 0900.*still runs timeout-center 0\.1\.0 and later/);
    // Registered with its version, and seen as live.
    await expect.poll(async () => (await liveProcesses(pool)).map((p) => [p.role, p.version]), { timeout: 10_000 }).toContainEqual(['worker', VERSION]);

    // A breaking step with this worker live: refused, naming it; nothing applied.
    const breaking = migrationsDir(BREAKING);
    const refused = await migrate(pool, silent, breaking).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OlderProcessesError);
    expect((refused as Error).message).toMatch(
      new RegExp(`0901_breaking needs timeout-center 99\\.0\\.0.*\\n  - worker ${VERSION.replace(/\./g, '\\.')} on \\S+ pid ${worker.pid}`),
    );
    expect((await pool.query('SELECT count(*)::int AS n FROM timeout_center.migrations WHERE version = 901')).rows[0].n).toBe(0);

    // --force: applied; the running worker meets it within seconds and stops (exit 3), saying why.
    await migrate(pool, capture, breaking, { force: true });
    expect(logs.some((l) => l.msg === 'migrate --force: applying a migration that live older processes cannot run beside')).toBe(true);
    const exit = await Promise.race([worker.exited, sleep(20_000).then(() => 'still running' as const)]);
    expect(exit).toEqual({ code: 3, signal: null });
    expect(
      worker.lines.some((l) => (l.level ?? 0) >= 50 && /schema changed under this running process.*needs timeout-center 99\.0\.0/.test(String(l.msg))),
    ).toBe(true);

    // A new start refuses it outright.
    const r = await runCli(['worker', '--config', cfg], env);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/needs timeout-center 99\.0\.0 or newer; this is .*Run timeout-center 99\.0\.0 or newer/);
  });

  it('names the processes of the code before 1.0.0 by their connections', async () => {
    await migrate(pool, silent);
    const legacy = new pg.Client({ connectionString: db.url, application_name: 'timeout-center worker' });
    await legacy.connect();
    try {
      const live = await liveProcesses(pool);
      expect(live).toContainEqual(expect.objectContaining({ role: 'timeout-center worker', version: null, source: 'connections', connections: 1 }));
    } finally {
      await legacy.end();
    }
  });

  it('a step that meets a lock backs off instead of queueing in front of the inserts', async () => {
    await migrate(pool, silent);
    await pool.query("INSERT INTO timeout_center.kinds (kind) VALUES ('order.unpaid') ON CONFLICT DO NOTHING");
    // A report holds ACCESS SHARE on timeouts for 1.5 s; ADD COLUMN needs ACCESS EXCLUSIVE.
    const report = await pool.connect();
    await report.query('BEGIN');
    await report.query('SELECT count(*) FROM timeout_center.timeouts');
    const latencies: number[] = [];
    let inserting = true;
    const inserts = (async () => {
      for (let i = 0; inserting; i++) {
        const t0 = Date.now();
        await pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', $1, now() + interval '1 hour')", [`lock-${i}`]);
        latencies.push(Date.now() - t0);
        await sleep(20);
      }
    })();
    await sleep(200);
    const migrating = migrate(
      pool,
      capture,
      migrationsDir({ '0900_add_column.sql': 'ALTER TABLE timeout_center.timeouts ADD COLUMN IF NOT EXISTS note text;\n' }),
    );
    await sleep(1500);
    await report.query('COMMIT');
    report.release();
    const result = await migrating;
    inserting = false;
    await inserts;
    expect(result.applied).toEqual(['0900_add_column']);
    expect(logs.filter((l) => l.msg === 'migration step met a lock; backing off').length).toBeGreaterThan(0);
    // An insert queued behind the waiting ALTER waits its lock_timeout (100 ms) at most, not the
    // report's 1.5 s.
    expect(Math.max(...latencies)).toBeLessThan(600);
  });

  it('CREATE INDEX CONCURRENTLY cut off mid-build: the next migrate drops the INVALID index and builds it', async () => {
    await migrate(pool, silent);
    await pool.query("INSERT INTO timeout_center.kinds (kind) VALUES ('order.unpaid') ON CONFLICT DO NOTHING");
    const dir = migrationsDir({
      '0900_index.sql': '-- tc:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_created ON timeout_center.timeouts (created_at);\n',
    });
    // An open writer: the build waits for it, and is cut off there.
    const writer = await pool.connect();
    await writer.query('BEGIN');
    await writer.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', 'w', now() + interval '1 hour')");
    const migratePool = new pg.Pool({ connectionString: db.url, max: 2, application_name: 'migrate under test' });
    migratePool.on('error', () => {});
    migratePool.on('connect', (c) => c.on('error', () => {})); // its backend is terminated below (node-postgres #2762)
    const first = migrate(migratePool, silent, dir).catch((e: unknown) => e);
    await expect
      .poll(
        async () =>
          (
            await pool.query(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'migrate under test' AND query ILIKE '%CREATE INDEX CONCURRENTLY%'",
            )
          ).rows[0].n,
        { timeout: 10_000 },
      )
      .toBe(1);
    await pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'migrate under test'");
    expect(await first).toBeInstanceOf(Error);
    await migratePool.end();
    const valid = async () =>
      (await pool.query<{ valid: boolean }>("SELECT indisvalid AS valid FROM pg_index WHERE indexrelid = 'timeout_center.timeouts_created'::regclass")).rows[0]
        ?.valid;
    expect(await valid()).toBe(false);
    await writer.query('COMMIT');
    writer.release();

    const second = await migrate(pool, silent, dir);
    expect(second.applied).toEqual(['0900_index']);
    expect(await valid()).toBe(true);
  });
});
