import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { markerKey, streamKey } from '../../src/transport/keys.js';
import { describeTarget } from '../../src/transport/redis-connection.js';

const kinds = { 'order.unpaid': { handler: { type: 'sql' as const, sql: 'UPDATE o SET s = 1 WHERE id = ANY($1) RETURNING id' } } };
const DB = { DATABASE_URL: 'postgres://x' };

const problems = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
};

describe('Redis connection config (issue 26)', () => {
  it('one node: redisUrl or REDIS_URL, as before', () => {
    expect(loadConfig({ object: { kinds, redisUrl: 'redis://file:6379' }, env: DB }).redisConnection).toEqual({ mode: 'single', url: 'redis://file:6379' });
    const c = loadConfig({ object: { kinds, redisUrl: 'redis://file:6379' }, env: { ...DB, REDIS_URL: 'redis://env:6379' } });
    expect(c.redisConnection).toEqual({ mode: 'single', url: 'redis://env:6379' });
    expect(c.redisUrl).toBe('redis://env:6379');
  });

  it('a cluster from the file (host:port or objects) or REDIS_CLUSTER, with credentials and TLS', () => {
    const file = loadConfig({ object: { kinds, redis: { cluster: ['10.0.0.1:7000', { host: '10.0.0.2', port: 7001 }], password: 'pw', tls: true } }, env: DB });
    expect(file.redisConnection).toEqual({
      mode: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 7001 },
      ],
      username: undefined,
      password: 'pw',
      tls: true,
    });
    expect(file.redisUrl).toBe('');
    const env = loadConfig({ object: { kinds, redisUrl: 'redis://ignored' }, env: { ...DB, REDIS_CLUSTER: 'a:1, b:2,[::1]:3', REDIS_PASSWORD: 'secret' } });
    expect(env.redisConnection).toMatchObject({
      mode: 'cluster',
      nodes: [
        { host: 'a', port: 1 },
        { host: 'b', port: 2 },
        { host: '::1', port: 3 },
      ],
      password: 'secret',
      tls: false,
    });
    expect(describeTarget(env.redisConnection)).toBe('cluster a:1,b:2,::1:3');
  });

  it('Sentinel from the file or REDIS_SENTINELS + REDIS_SENTINEL_NAME', () => {
    const c = loadConfig({
      object: { kinds },
      env: { ...DB, REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'main', REDIS_SENTINEL_PASSWORD: 'sp' },
    });
    expect(c.redisConnection).toMatchObject({
      mode: 'sentinel',
      name: 'main',
      sentinelPassword: 'sp',
      sentinels: [{ host: 's1', port: 26379 }, { host: 's2' }],
    });
    const f = loadConfig({ object: { kinds, redis: { sentinels: ['s:1'], sentinelName: 'main' } }, env: DB });
    expect(describeTarget(f.redisConnection)).toBe('sentinel primary "main" via s:1');
  });

  it('says what is wrong and where', () => {
    expect(problems(() => loadConfig({ object: { kinds }, env: { ...DB, REDIS_URL: 'redis://a', REDIS_CLUSTER: 'b:1' } }))).toMatch(
      /REDIS_URL, REDIS_CLUSTER: set only one of/,
    );
    expect(problems(() => loadConfig({ object: { kinds }, env: { ...DB, REDIS_CLUSTER: 'nohost' } }))).toMatch(/REDIS_CLUSTER: "nohost": a node is host:port/);
    expect(problems(() => loadConfig({ object: { kinds }, env: { ...DB, REDIS_CLUSTER: 'h:70000' } }))).toMatch(
      /REDIS_CLUSTER: port must be 1-65535, got 70000/,
    );
    expect(problems(() => loadConfig({ object: { kinds }, env: { ...DB, REDIS_SENTINELS: 's:1' } }))).toMatch(/sentinelName: name the primary/);
    expect(problems(() => loadConfig({ object: { kinds, redis: { cluster: ['a:1'], sentinels: ['b:2'], sentinelName: 'm' } }, env: DB }))).toMatch(
      /redis: give cluster or sentinels, not both/,
    );
    expect(problems(() => loadConfig({ object: { kinds, redisUrl: 'redis://a', redis: { cluster: ['a:1'] } }, env: DB }))).toMatch(
      /redisUrl: give redisUrl \(one node\) or redis.cluster/,
    );
    expect(problems(() => loadConfig({ object: { kinds, redis: { cluster: [] } }, env: DB }))).toMatch(/redis\.cluster/);
    expect(problems(() => loadConfig({ object: { kinds, redisKeyPrefix: '{tc}' }, env: { ...DB, REDIS_URL: 'redis://a' } }))).toMatch(
      /redisKeyPrefix: no \{ or \}/,
    );
    expect(problems(() => loadConfig({ object: { kinds }, env: DB }))).toMatch(/redisUrl: not set: set REDIS_URL .*REDIS_CLUSTER/);
  });

  it("keys: a kind's stream and marker share one hash tag, the kind", () => {
    expect(streamKey('tc', 'order.unpaid')).toBe('tc:{order.unpaid}:shards');
    expect(markerKey('tc', 'order.unpaid')).toBe('tc:{order.unpaid}:marker');
  });
});
