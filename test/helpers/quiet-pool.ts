// A pg pool for tests that kill database servers. node-postgres emits 'error' on an idle client
// whose server dies (the pool's 'error') and on a checked-out one (the client's, node-postgres
// #2762); either, unheard, ends the test process. The queries reject all the same, which is what
// the tests check.
import pg from 'pg';

export function quietPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 5000 });
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}
