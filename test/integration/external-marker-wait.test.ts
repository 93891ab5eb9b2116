// A run that waits for another run's marker in the business database (that run's transaction is
// still open: a stopped worker, or one still committing) gives up at the kind's time limit and
// defers the shard. The connection it waited on goes back to the pool: it must go back usable, out
// of the transaction it began, or the next shard on that database fails at BEGIN with 25P02
// (current transaction is aborted) and counts a batch failure against the target's breaker.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Alerter } from '../../src/alerts/alerter.js';
import { parseConfig, type LoadedConfig } from '../../src/config.js';
import { syncKinds } from '../../src/db/kinds.js';
import { createLogger } from '../../src/observability/logger.js';
import { Metrics } from '../../src/observability/metrics.js';
import { CircuitBreakers } from '../../src/worker/breakers.js';
import { BusinessDatabases, prepareBusinessDatabases } from '../../src/worker/business-db.js';
import { ExternalExecutor } from '../../src/worker/external-executor.js';
import { resolveHandlers } from '../../src/worker/handlers.js';
import { takeLease } from '../../src/worker/lease.js';
import { CLOSE_SQL, createOrdersSchema } from '../helpers/orders.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';

describe('a run that waited for another run marker', () => {
  let center: TestDatabase;
  let business: TestDatabase;
  let pool: pg.Pool;
  let businessPool: pg.Pool;
  const logger = createLogger('silent');

  beforeAll(async () => {
    center = await createTestDatabase('marker-wait');
    business = await createTestDatabase('marker-wait-biz', { empty: true });
    pool = new pg.Pool({ connectionString: center.url, max: 4 });
    businessPool = new pg.Pool({ connectionString: business.url, max: 2 });
    await createOrdersSchema(businessPool);
    await prepareBusinessDatabases({ biz: business.url }, logger);
  }, 60_000);

  afterAll(async () => {
    await businessPool?.end();
    await pool?.end();
    await business?.drop();
    await center?.drop();
  });

  it('defers the shard and gives its connection back out of any transaction', async () => {
    const input = {
      businessDatabases: { biz: { url: business.url, poolSize: 1 } },
      kinds: { [KIND]: { timeLimitMs: 500, handler: { type: 'sql', sql: CLOSE_SQL, database: 'biz' } } },
    };
    const parsed = parseConfig(input);
    const config = { ...parsed, databaseUrl: center.url, businessDatabaseUrls: { biz: business.url }, baseDir: '.', source: 'test' } as unknown as LoadedConfig;
    await syncKinds(pool, parsed.kinds);
    const handlers = await resolveHandlers(config, [KIND], new Map(), pool);
    const handler = handlers.get(KIND)!;

    await businessPool.query(`INSERT INTO orders (id, status) VALUES (1, 'unpaid'), (2, 'unpaid')`);
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '1', now() - interval '1 s'), ($1, '2', now() - interval '1 s')`, [
      KIND,
    ]);
    const scan = (await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', now(), 'mapped') RETURNING id`))
      .rows[0].id;
    const shardId = Number(
      (
        await pool.query(`INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, target) VALUES ($1, $2, 0, 2, 2, 'biz') RETURNING id`, [
          scan,
          KIND,
        ])
      ).rows[0].id,
    );
    const lease = (await takeLease(pool, shardId, 'test-worker', 30_000))!;
    expect(lease).toBeDefined();

    // another run of the shard holds its marker: its transaction is open
    const holder = await businessPool.connect();
    await holder.query('BEGIN');
    await holder.query(`INSERT INTO timeout_center.markers (shard_id, lease_token, applied) VALUES ($1, gen_random_uuid(), '{}')`, [shardId]);

    const metrics = new Metrics('test');
    const databases = new BusinessDatabases({ biz: business.url }, { biz: 1 }, logger, 10_000);
    const breakers = new CircuitBreakers(parsed.breaker, pool, 'test-worker', metrics, new Alerter(parsed.alerts, logger, metrics, 'test'), logger);
    const executor = new ExternalExecutor(pool, databases, breakers, metrics);
    try {
      const outcome = await executor.run(lease, { ...handler, external: handler.external! }, logger);
      expect(outcome).toEqual({ status: 'not-ours', reason: 'deferred until the target answers' });
      await holder.query('ROLLBACK');
      // the pool's one connection is the one that waited: usable, and idle (no transaction)
      const { rows } = await databases.pool('biz').query<{ open: boolean }>(`SELECT now() <> statement_timestamp() AS open`);
      expect(rows[0]!.open).toBe(false);
    } finally {
      holder.release();
      await databases.close();
    }
  });
});
