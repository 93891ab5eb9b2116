// Runs once before all test files: makes sure PostgreSQL and Redis answer. Where they do not and
// Docker is available, starts them with testcontainers and hands their URLs to the test files.
// At the end it prints the one line naming the system tools tests were skipped for (system-tools.ts).
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';
import { createLogger } from '../../src/observability/logger.js';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { ADMIN_DATABASE_URL, createTestDatabase, START_POSTGRES, START_REDIS, TEMPLATE_DATABASE_ENV, TEST_REDIS_URL } from './services.js';
import { SKIPPED_TOOLS_FILE_ENV, skippedToolsLine } from './system-tools.js';

function reachable(url: string, defaultPort: number): Promise<boolean> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect({ host: u.hostname, port: Number(u.port || defaultPort) });
    socket.setTimeout(2000);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

function dockerAvailable(): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 5000 });
    return true;
  } catch {
    return false;
  }
}

export default async function setup(_project: TestProject): Promise<() => Promise<void>> {
  const stops: (() => Promise<unknown>)[] = [];
  const pgOk = await reachable(ADMIN_DATABASE_URL, 5432);
  const redisOk = await reachable(TEST_REDIS_URL, 6379);
  if ((!pgOk || !redisOk) && dockerAvailable()) {
    if (!pgOk) {
      const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
      const c = await new PostgreSqlContainer('postgres:15').withUsername('postgres').withPassword('postgres').withDatabase('postgres').start();
      process.env['TEST_DATABASE_URL'] = c.getConnectionUri();
      stops.push(() => c.stop());
    }
    if (!redisOk) {
      const { RedisContainer } = await import('@testcontainers/redis');
      const c = await new RedisContainer('redis:7').start();
      process.env['TEST_REDIS_URL'] = c.getConnectionUrl();
      stops.push(() => c.stop());
    }
  } else {
    const missing: string[] = [];
    if (!pgOk) missing.push(`PostgreSQL is not answering at ${ADMIN_DATABASE_URL} (TEST_DATABASE_URL). Start it with:\n    ${START_POSTGRES}`);
    if (!redisOk) missing.push(`Redis is not answering at ${TEST_REDIS_URL} (TEST_REDIS_URL). Start it with:\n    ${START_REDIS}`);
    if (missing.length > 0) throw new Error(`test services unreachable and no Docker engine for testcontainers:\n  ${missing.join('\n  ')}`);
  }
  // One template database, migrated once; each test file's database is a copy of it (services.ts).
  // On the machine's PostgreSQL only: a server started by testcontainers is not known to this
  // module's URLs yet, and its files migrate their own databases as before.
  if (pgOk) {
    const template = await createTestDatabase('template', { empty: true });
    const templatePool = new pg.Pool({ connectionString: template.url, max: 1 });
    try {
      await migrate(templatePool, createLogger('silent'));
    } finally {
      await templatePool.end();
    }
    process.env[TEMPLATE_DATABASE_ENV] = template.name;
    stops.unshift(() => template.drop());
  }
  // Workers inherit this environment; each appends the tools it skipped on (system-tools.ts).
  const skippedDir = mkdtempSync(join(tmpdir(), 'tc-skipped-tools-'));
  const skippedFile = join(skippedDir, 'tools');
  process.env[SKIPPED_TOOLS_FILE_ENV] = skippedFile;
  return async () => {
    for (const stop of stops) await stop().catch(() => {});
    const line = skippedToolsLine(skippedFile);
    rmSync(skippedDir, { recursive: true, force: true });
    if (line) console.log(line);
  };
}
