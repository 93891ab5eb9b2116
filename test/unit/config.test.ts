import { describe, expect, it } from 'vitest';
import { ConfigError, databaseSilenceMs, loadConfig, parseConfig } from '../../src/config.js';
import { parseFailpoints } from '../../src/failpoints.js';

const kinds = { 'order.unpaid': { handler: { type: 'sql' as const, sql: 'UPDATE o SET s = 1 WHERE id = ANY($1) RETURNING id' } } };

describe('config', () => {
  it('fills documented defaults', () => {
    const c = parseConfig({ kinds });
    expect(c.kinds['order.unpaid']).toMatchObject({ shardSize: 500, maxAttempts: 5, timeLimitMs: 10_000 });
    expect(c.coordinator).toMatchObject({ schedule: '* * * * * *', maxInFlightShards: 64 });
    expect(c.worker).toMatchObject({ concurrency: 4, leaseMs: 30_000 });
  });

  it('names every bad field with its path', () => {
    try {
      parseConfig({ kinds: { 'order.unpaid': { shardSize: -1, handler: { type: 'smtp' } } }, worker: { concurrency: 'many' } }, 'x.yaml');
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const msg = (err as Error).message;
      expect(msg).toMatch(/invalid configuration in x\.yaml/);
      expect(msg).toMatch(/kinds\."order\.unpaid"\.shardSize/);
      expect(msg).toMatch(/kinds\."order\.unpaid"\.handler/);
      expect(msg).toMatch(/worker\.concurrency/);
    }
  });

  it('flow control per kind: not paused and unlimited by default; limits validated with their path', () => {
    const c = parseConfig({ kinds });
    expect(c.kinds['order.unpaid']).toMatchObject({ paused: false });
    expect(c.kinds['order.unpaid']!.maxRunningShards).toBeUndefined();
    expect(c.kinds['order.unpaid']!.rateLimit).toBeUndefined();
    const set = parseConfig({ kinds: { 'order.unpaid': { ...kinds['order.unpaid'], paused: true, maxRunningShards: 2, rateLimit: 0.5 } } });
    expect(set.kinds['order.unpaid']).toMatchObject({ paused: true, maxRunningShards: 2, rateLimit: 0.5 });
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ paused: 'yes' }, /kinds\."order\.unpaid"\.paused: .*boolean/],
      [{ maxRunningShards: 0 }, /kinds\."order\.unpaid"\.maxRunningShards: .*>=1/],
      [{ maxRunningShards: 1.5 }, /kinds\."order\.unpaid"\.maxRunningShards: .*expected int/],
      [{ rateLimit: 0 }, /kinds\."order\.unpaid"\.rateLimit: .*>0/],
      [{ rateLimit: -5 }, /kinds\."order\.unpaid"\.rateLimit/],
      [{ rateLimit: 'fast' }, /kinds\."order\.unpaid"\.rateLimit: .*number/],
      [{ rateLimit: 1e9 }, /kinds\."order\.unpaid"\.rateLimit: .*<=10000000/],
    ];
    for (const [fields, message] of bad) {
      expect(() => parseConfig({ kinds: { 'order.unpaid': { ...kinds['order.unpaid'], ...fields } } }, 'x.yaml')).toThrow(message);
    }
  });

  it('takes URLs from the environment over the file, and requires both', () => {
    const c = loadConfig({ object: { kinds, databaseUrl: 'postgres://file' }, env: { DATABASE_URL: 'postgres://env', REDIS_URL: 'redis://env' } });
    expect(c.databaseUrl).toBe('postgres://env');
    expect(() => loadConfig({ object: { kinds }, env: {} })).toThrow(/DATABASE_URL.*\n.*REDIS_URL/s);
  });

  it('refuses a handler time limit that outlasts the lease', () => {
    expect(() =>
      loadConfig({ object: { kinds: { a: { ...kinds['order.unpaid'], timeLimitMs: 40_000 } } }, env: { DATABASE_URL: 'x', REDIS_URL: 'y' } }),
    ).toThrow(/kinds\.a\.timeLimitMs: 40000 ms must be below worker\.leaseMs/);
  });

  it('bounds a silent PostgreSQL connection above the longest handler time limit', () => {
    expect(databaseSilenceMs(parseConfig({ kinds }))).toBe(35_000);
    expect(databaseSilenceMs(parseConfig({ kinds: { a: { ...kinds['order.unpaid'], timeLimitMs: 2000 } }, worker: { leaseMs: 5000 } }))).toBe(30_000);
    expect(databaseSilenceMs(parseConfig({ kinds: { a: { ...kinds['order.unpaid'], timeLimitMs: 50_000 } }, worker: { leaseMs: 60_000 } }))).toBe(65_000);
    expect(databaseSilenceMs(parseConfig({ kinds, databaseSilenceMs: 12_000 }))).toBe(12_000);
    expect(() => parseConfig({ kinds, databaseSilenceMs: 10_000 })).toThrow(
      /databaseSilenceMs: 10000 ms must be above the longest kind's timeLimitMs \(10000 ms\)/,
    );
  });

  it('refuses a worker kinds filter naming an undeclared kind', () => {
    expect(() => loadConfig({ object: { kinds, worker: { kinds: ['order.x'] } }, env: { DATABASE_URL: 'x', REDIS_URL: 'y' } })).toThrow(
      /worker\.kinds: unknown kind\(s\) order\.x/,
    );
  });

  it('parseConfig makes the same cross-field checks as loadConfig (one schema)', () => {
    expect(() => parseConfig({ kinds, worker: { kinds: ['order.x'] } })).toThrow(/worker\.kinds: unknown kind\(s\) order\.x; declared kinds: order\.unpaid/);
    expect(() => parseConfig({ kinds: { 'order.unpaid': { ...kinds['order.unpaid'], timeLimitMs: 5000 } }, worker: { leaseMs: 5000 } })).toThrow(
      /kinds\."order\.unpaid"\.timeLimitMs: 5000 ms must be below worker\.leaseMs \(5000 ms\)/,
    );
    expect(() => parseConfig({ kinds, coordinator: { schedule: 'every second' } })).toThrow(
      /coordinator\.schedule: "every second" is not a valid node-cron expression/,
    );
    expect(parseConfig({ kinds, coordinator: { schedule: '*/5 * * * * *' }, worker: { kinds: ['order.unpaid'] } }).worker.kinds).toEqual(['order.unpaid']);
  });

  it('puts command-line overrides through the schema with the file', () => {
    const env = { DATABASE_URL: 'x', REDIS_URL: 'y' };
    expect(loadConfig({ object: { kinds }, env, overrides: { worker: { concurrency: 8 }, httpPort: 0 } })).toMatchObject({
      worker: { concurrency: 8, leaseMs: 30_000 },
      httpPort: 0,
    });
    expect(() => loadConfig({ object: { kinds }, env, overrides: { worker: { concurrency: 1000 } } })).toThrow(/worker\.concurrency/);
  });
});

describe('failpoints', () => {
  it('parses names, counts and arguments', () => {
    const points = parseFailpoints('worker.before-commit=kill; coordinator.before-publish=2*sleep(300);x=error(boom)');
    expect(points.get('worker.before-commit')).toEqual({ action: { type: 'kill' }, remaining: Infinity });
    expect(points.get('coordinator.before-publish')).toEqual({ action: { type: 'sleep', ms: 300 }, remaining: 2 });
    expect(points.get('x')).toEqual({ action: { type: 'error', message: 'boom' }, remaining: Infinity });
  });
  it('refuses a spec it cannot parse', () => {
    expect(() => parseFailpoints('worker=explode')).toThrow(/cannot parse "worker=explode"/);
  });
});
