// The leadership loop against a Redis whose connection goes silent (no reply, no close), on a
// plain ioredis client without the product's socket timeout: the loop must bound each lock
// command by the lock's lifetime on its own. Before, a renewal that never answered left a leader
// that neither led (its lock ran out) nor stepped down, and no other step ever ran (CI once met
// a drain stalled that way after a Sentinel failover; test/faults/redis.test.ts 4c is the whole
// system's form).
import { Redis } from 'ioredis';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redlockLeaderLock, type LeaderLock } from '../../src/coordinator/leader-lock.js';
import { Leadership } from '../../src/coordinator/leadership.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { startSilentProxy, type SilentProxy } from '../helpers/silent-proxy.js';

const TTL = 1000;
const logger = pino({ level: 'silent' });
let db: TestDatabase;
let pool: pg.Pool;
let proxy: SilentProxy;
const clients: Redis[] = [];

beforeAll(async () => {
  db = await createTestDatabase('leadership-silent');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  proxy = await startSilentProxy(Number(new URL(TEST_REDIS_URL).port || 6379), new URL(TEST_REDIS_URL).hostname);
});

afterAll(async () => {
  for (const c of clients) c.disconnect();
  await proxy?.close();
  await pool?.end();
  await db?.drop();
});

/** redlock on its own connection through the proxy; counts the acquire attempts. */
async function lockThroughProxy(): Promise<{ lock: LeaderLock; attempts: () => number }> {
  const redis = new Redis({ host: '127.0.0.1', port: proxy.port, maxRetriesPerRequest: 3 });
  redis.on('error', () => {});
  clients.push(redis);
  await redis.ping();
  const inner = redlockLeaderLock(redis);
  let n = 0;
  return {
    lock: {
      acquire: (key, ttlMs) => {
        n += 1;
        return inner.acquire(key, ttlMs);
      },
    },
    attempts: () => n,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('leadership when Redis goes silent', () => {
  it('a leader whose renewal gets no answer steps down by its lock expiry, competes again, and stops at once', async () => {
    const key = `${testKeyPrefix('leadership-silent')}:lock`;
    const { lock, attempts } = await lockThroughProxy();
    const a = new Leadership({ lock, pool, lockKey: key, ttlMs: TTL, coordinatorId: 'a', logger });
    const deposed: string[] = [];
    a.on('deposed', (reason) => deposed.push(reason));
    const elected = new Promise<number>((resolve) => a.once('elected', resolve));
    await a.start();
    await elected;
    expect(a.isLeader).toBe(true);

    expect(proxy.silence()).toBeGreaterThanOrEqual(1);
    const silencedAt = Date.now();
    while (deposed.length === 0 && Date.now() - silencedAt < 5 * TTL) await sleep(20);
    // Within the lock's lifetime plus a renewal period.
    expect(deposed, 'stepped down').toHaveLength(1);
    expect(deposed[0]).toMatch(/no answer from Redis/);
    expect(Date.now() - silencedAt).toBeLessThan(TTL + TTL / 3 + 500);
    expect(a.isLeader).toBe(false);

    // Standby now: it keeps trying (each acquire bounded too), rather than waiting on one forever.
    const before = attempts();
    await sleep(3 * TTL);
    expect(attempts() - before, 'acquire attempts while Redis is silent').toBeGreaterThanOrEqual(2);

    const stopping = Date.now();
    await a.stop();
    expect(Date.now() - stopping, 'stop() does not wait on a silent Redis').toBeLessThan(TTL + 200);
  });
});
