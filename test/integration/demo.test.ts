// `timeout-center demo` as a person runs it: a child process, nothing but Node in embedded mode
// (PGlite + in-process channel), and once against the real services. It must finish on its own,
// exit 0, and leave no unpaid order open.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { killAll, runCli, type LogLine } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

interface Summary {
  total: number;
  closed: number;
  skipped: number;
  failed: number;
  unpaidLeft: number;
  paidOrders: number;
  shards: number;
  database: string;
  channel: string;
  ok: boolean;
}

function summaryOf(lines: LogLine[]): Summary {
  const line = lines.find((l) => typeof l === 'object' && l !== null && 'summary' in l);
  expect(line, `no JSON summary line in the demo's output:\n${lines.map((l) => l.msg ?? JSON.stringify(l)).join('\n')}`).toBeDefined();
  return (line as unknown as { summary: Summary }).summary;
}

const ORDERS = 1000; // 10 % paid
const dirs: string[] = [];
let db: TestDatabase | undefined;

afterAll(async () => {
  const leaked = await killAll();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  await db?.drop();
  expect(leaked, 'processes still running after the test').toEqual([]);
});

describe('timeout-center demo', () => {
  it('embedded (no DATABASE_URL / REDIS_URL): PGlite + in-process channel close every unpaid order, then exit 0', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'tc-demo-'));
    dirs.push(dataDir);
    const args = ['demo', '--orders', String(ORDERS), '--spread', '3', '--data-dir', dataDir, '--grace', '30', '--json'];
    // ~15 s on an idle 2-core machine (PGlite's first initdb is 5-8 s of it); room for a loaded one.
    const first = await runCli(args, { DATABASE_URL: undefined, REDIS_URL: undefined }, 90_000);
    expect(first.code, first.stderr).toBe(0);
    const s = summaryOf(first.lines);
    expect(s.database).toContain('PGlite');
    expect(s.channel).toContain('in-process');
    expect(s).toMatchObject({ total: ORDERS, closed: ORDERS * 0.9, skipped: ORDERS * 0.1, failed: 0, unpaidLeft: 0, ok: true });
    expect(s.shards).toBeGreaterThan(1);

    // The data folder is kept: a second run reopens it and seeds new orders beside the old ones.
    const second = await runCli(
      ['demo', '--orders', '200', '--spread', '1', '--data-dir', dataDir, '--json'],
      { DATABASE_URL: undefined, REDIS_URL: undefined },
      45_000,
    );
    expect(second.code, second.stderr).toBe(0);
    expect(summaryOf(second.lines)).toMatchObject({ total: 200, closed: 180, skipped: 20, unpaidLeft: 0, ok: true });
  });

  it('with DATABASE_URL and REDIS_URL set it uses the real services', async () => {
    db = await createTestDatabase('demo');
    const args = ['demo', '--orders', '1000', '--spread', '2', '--redis-prefix', testKeyPrefix('demo'), '--json'];
    const run = await runCli(args, { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL }, 60_000);
    expect(run.code, run.stderr).toBe(0);
    const s = summaryOf(run.lines);
    expect(s.database).toContain('PostgreSQL at');
    expect(s.channel).toContain('Redis Streams');
    expect(s).toMatchObject({ total: 1000, closed: 900, skipped: 100, failed: 0, unpaidLeft: 0, ok: true });
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM demo_orders WHERE status = 'closed'");
      expect(rows[0]!.n).toBe(900);
    } finally {
      await pool.end();
    }
  });
});
