// `npm start` (a README command) stops as one process tree: SIGTERM sent to the npm process
// reaches the `node ... run` it started, through npm and the start script, whatever step the
// script is in (issue 10, item 9: the child kept running and retried a dropped database).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATION_LOCK_KEY } from '../../src/db/migrate.js';
import { CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let db: TestDatabase;
const started: ChildProcess[] = [];

/** Processes in the process group (the npm process leads it: spawned detached). */
function group(pgid: number): string[] {
  try {
    return execFileSync('ps', ['-o', 'pid=,args=', '-g', String(pgid)], { encoding: 'utf8' }).split('\n').map((l) => l.trim()).filter(Boolean);
  } catch {
    return []; // ps exits 1 when nothing matches
  }
}

async function until(test: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (test()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return test();
}

function npmStart(): { child: ChildProcess; output: () => string } {
  const config = writeConfig({ redisKeyPrefix: testKeyPrefix('npmstart'), kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
  const child = spawn('npm', ['start'], {
    cwd: ROOT,
    detached: true, // its own process group, so the test can see (and clean up) every descendant
    env: { ...process.env, DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: config, PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (out += c));
  return { child, output: () => out };
}

beforeAll(async () => {
  db = await createTestDatabase('npmstart');
});

afterAll(async () => {
  for (const c of started) {
    try {
      process.kill(-c.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await db?.drop();
});

describe('npm start', () => {
  it('SIGTERM to the npm process stops the whole tree, the node run child included', async () => {
    const { child, output } = npmStart();
    const exited = once(child, 'exit');
    const up = await until(() => /worker started/.test(output()), 90_000);
    expect(up, output()).toBe(true);
    expect(group(child.pid!).some((p) => /dist\/cli\/main\.js run/.test(p)), group(child.pid!).join('\n')).toBe(true);
    process.kill(child.pid!, 'SIGTERM');
    await exited;
    const gone = await until(() => group(child.pid!).length === 0, 40_000);
    expect(gone, `still running after npm exited:\n${group(child.pid!).join('\n')}\n--- output:\n${output()}`).toBe(true);
    expect(output()).toMatch(/stopp/i);
  }, 150_000);

  it('SIGTERM during the migrate step stops the tree too', async () => {
    // Hold the migrations' advisory lock, so the script's migrate step waits on it; stop npm then.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY.toString()]);
      const { child, output } = npmStart();
      const exited = once(child, 'exit');
      const waiting = await until(() => group(child.pid!).some((p) => /dist\/cli\/main\.js migrate/.test(p)), 90_000);
      expect(waiting, output()).toBe(true);
      await new Promise((r) => setTimeout(r, 500));
      process.kill(child.pid!, 'SIGTERM');
      await exited;
      const gone = await until(() => group(child.pid!).length === 0, 20_000);
      expect(gone, `still running after npm exited:\n${group(child.pid!).join('\n')}\n--- output:\n${output()}`).toBe(true);
    } finally {
      await holder.end();
    }
  }, 150_000);
});
