// The end of every integration test file: kill what it started, close its pool, drop its
// database, and fail loudly when a process was still running (a leaked worker).
import type pg from 'pg';
import { expect } from 'vitest';
import { killAll } from './processes.js';
import type { TestDatabase } from './services.js';

export async function tearDown(resources: { pool?: pg.Pool | undefined; db?: TestDatabase | undefined }): Promise<void> {
  const leaked = await killAll();
  await resources.pool?.end();
  await resources.db?.drop();
  expect(leaked, 'processes still running after the test').toEqual([]);
}
