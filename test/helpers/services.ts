// Test services: real PostgreSQL and Redis. URLs come from TEST_DATABASE_URL / TEST_REDIS_URL
// (default: the local services). When they are unreachable and Docker answers, testcontainers
// starts them (globalSetup); otherwise the run fails with the exact command that starts them.
// Every test file gets its own database and its own Redis key prefix.
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const ADMIN_DATABASE_URL = process.env['TEST_DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const TEST_REDIS_URL = process.env['TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379';

export const START_POSTGRES =
  'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start   # or: docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15';
export const START_REDIS = 'redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no   # or: docker run -d -p 6379:6379 redis:7';

export function uniqueName(label: string): string {
  return `tc_${label
    .replace(/[^a-z0-9]+/gi, '_')
    .toLowerCase()
    .slice(0, 30)}_${randomBytes(3).toString('hex')}`;
}

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** Set by the global setup (global-setup.ts): a database migrated once, that each test file's
 *  database is copied from instead of migrating its own (graphile-worker's template database). */
export const TEMPLATE_DATABASE_ENV = 'TC_TEST_TEMPLATE_DATABASE';

/** A fresh database for one test file, with the center's schema already migrated (copied from the
 *  run's template), or `empty` for a test of migrations themselves; drop() removes it
 *  (terminating leftover sessions). */
export async function createTestDatabase(label: string, options: { empty?: boolean } = {}): Promise<TestDatabase> {
  const name = uniqueName(label);
  const template = options.empty ? undefined : process.env[TEMPLATE_DATABASE_ENV];
  const admin = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
  } finally {
    await admin.end();
  }
  return {
    name,
    url: withDatabase(ADMIN_DATABASE_URL, name),
    async drop() {
      const c = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
      await c.connect();
      try {
        // Give sessions that are closing (a pool just ended, a killed process's backend) a moment
        // to go: FORCE terminates them, and a client still ending on our side would then see an
        // unhandled 57P01 error event.
        for (let i = 0; i < 25; i += 1) {
          const { rows } = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [name]);
          if (rows[0]!.n === 0) break;
          await new Promise((r) => setTimeout(r, 200));
        }
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/** A Redis key prefix no other test file uses. */
export function testKeyPrefix(label: string): string {
  return uniqueName(label);
}
