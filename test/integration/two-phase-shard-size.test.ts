// The map's largest shard for a business database (plan_shards.sql, issue 32): where the center
// allows prepared transactions, a shard's first run commits in two phases (src/worker/two-phase.ts)
// and its shard grows as large as a same-database shard (20,000 rows: its marker names no rows and
// it commits no held ids); where it does not, its runs commit first and it stays at 5,000. The real
// plan_shards.sql through planScan, once on the shared server (max_prepared_transactions 0,
// PostgreSQL's default) and once on a private one that allows them.
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { planScan } from '../../src/coordinator/map.js';
import { syncKinds } from '../../src/db/kinds.js';
import { createPool } from '../../src/db/pool.js';
import { migrate } from '../../src/db/migrate.js';
import { syncRoutes } from '../../src/db/routes.js';
import { syncTargets } from '../../src/db/targets.js';
import { createLogger } from '../../src/observability/logger.js';
import { startPostgres, stopAllServers } from '../helpers/servers.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';

const SQL = "UPDATE orders SET status = 'closed' WHERE id = ANY($1) RETURNING id";
const DUE = 120_000;

/** The claim limits of one plan of DUE due timeouts of a kind whose handler runs in business database b. */
async function plannedSizes(url: string): Promise<{ prepared: number; limits: number[] }> {
  const pool: pg.Pool = createPool({ connectionString: url, max: 2, applicationName: 'two-phase-shard-size test', logger: createLogger('silent') });
  try {
    await migrate(pool, createLogger('silent'));
    const config = parseConfig({ businessDatabases: { b: { url: 'postgres://b' } }, kinds: { 'k.b': { handler: { type: 'sql', sql: SQL, database: 'b' } } } });
    await syncKinds(pool, config.kinds);
    await syncRoutes(pool, config.kinds);
    await syncTargets(pool, config.businessDatabases);
    await pool.query(`UPDATE timeout_center.coordinator_lease SET epoch = 1, holder = 'test' WHERE id = 1`);
    await pool.query(`INSERT INTO timeout_center.workers (worker_id, host, pid, kinds) VALUES ('test-worker', 'test', 1, '{k.b}')`);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'k.b', g::text, now() - interval '1 s' FROM generate_series(1, $1::int) g`,
      [DUE],
    );
    const scan = await planScan(pool, 1, {
      coordinatorId: 'test',
      cutoff: new Date(),
      kinds: ['k.b'],
      maxShards: 1000,
      maxRows: 200_000,
      credit: {},
      rateBudget: {},
      targetBudget: {},
      goneAfterMs: 3000,
    });
    const { rows } = await pool.query<{ claim_limit: number; target: string | null }>(
      `SELECT claim_limit, target FROM timeout_center.shards WHERE scan_id = $1 ORDER BY id`,
      [scan!.scanId],
    );
    expect(rows.every((r) => r.target === 'b')).toBe(true);
    const prepared = Number((await pool.query<{ n: string }>(`SELECT current_setting('max_prepared_transactions') AS n`)).rows[0]!.n);
    return { prepared, limits: rows.map((r) => r.claim_limit) };
  } finally {
    await pool.end();
  }
}

let db: TestDatabase | undefined;
afterAll(async () => {
  await db?.drop();
  await stopAllServers();
});

describe("a business database's largest shard", () => {
  it('5,000 rows where runs commit first (no prepared transactions); every due row covered', async () => {
    db = await createTestDatabase('two_phase_shard_size');
    const { prepared, limits } = await plannedSizes(db.url);
    expect(prepared).toBe(0);
    expect(Math.max(...limits), limits.join(',')).toBe(5000);
    expect(limits.reduce((a, b) => a + b, 0)).toBe(DUE);
  });

  it('20,000 rows, as a same-database shard, where first runs commit in two phases', async () => {
    const server = await startPostgres({ settings: { max_prepared_transactions: '8' } });
    const { prepared, limits } = await plannedSizes(server.url());
    expect(prepared).toBe(8);
    expect(Math.max(...limits)).toBe(20000);
    expect(limits.reduce((a, b) => a + b, 0)).toBe(DUE);
  }, 60_000);
});
