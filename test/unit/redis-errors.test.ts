// Which errors a Redis failover produces on its own (logged at warn, once per episode) and which
// need a person (error). The errors are ioredis' own classes and a real pg connection error.
import { ReplyError } from 'ioredis';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isRedisFailoverError } from '../../src/transport/redis-errors.js';

describe('isRedisFailoverError', () => {
  it("takes a cluster's redirections, a demoted primary and a closed connection as a failover's", () => {
    for (const m of [
      'MOVED 3999 127.0.0.1:7002',
      'ASK 3999 127.0.0.1:7002',
      'TRYAGAIN Multiple keys request during rehashing of slot',
      'CLUSTERDOWN The cluster is down',
      "READONLY You can't write against a read only replica.",
      'LOADING Redis is loading the dataset in memory',
    ]) {
      expect(isRedisFailoverError(new ReplyError(m)), m).toBe(true);
    }
    expect(isRedisFailoverError(new Error('Too many Cluster redirections. Last error: Error: Connection is closed.'))).toBe(true);
    expect(isRedisFailoverError(new Error('Connection is closed.'))).toBe(true);
    // A commands connection that went silent, destroyed by its socket timeout (redis-connection.ts).
    expect(isRedisFailoverError(new Error("Socket timeout. Expecting data, but didn't receive any in 5000ms."))).toBe(true);
    expect(
      isRedisFailoverError(
        Object.assign(new Error('Reached the max retries per request limit (which is 3). Refer to "maxRetriesPerRequest" option for details.'), {
          name: 'MaxRetriesPerRequestError',
        }),
      ),
    ).toBe(true);
    expect(isRedisFailoverError(new Error('tick failed', { cause: new ReplyError('CLUSTERDOWN Hash slot not served') }))).toBe(true);
  });

  it('leaves everything else to error: a wrong command, a script error, a PostgreSQL connection refused', async () => {
    expect(isRedisFailoverError(new ReplyError("ERR unknown command 'XFOO'"))).toBe(false);
    expect(isRedisFailoverError(new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value'))).toBe(false);
    expect(isRedisFailoverError(new ReplyError('NOSCRIPT No matching script'))).toBe(false);
    const client = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:1/postgres', connectionTimeoutMillis: 2000 });
    const refused = await client.connect().then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(Error);
    expect(isRedisFailoverError(refused)).toBe(false);
    expect(isRedisFailoverError('a string')).toBe(false);
  });
});
