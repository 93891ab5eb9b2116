// The statement benches' database (bench/statements.ts, bench/explain.ts): a fresh database on the
// bench's PostgreSQL with our schema migrated, n orders (every 10th paid) and n timeouts due a
// second ago, on the minimal schema (bench/lib/limit.ts) or on ours, vacuumed, analyzed and
// checkpointed, so every statement starts from the same state.
import pg from 'pg';
import { pino } from 'pino';
// dist/: the benches that use this build first.
import { migrate } from '../../dist/db/migrate.js';
import { MINIMAL_DDL, MINIMAL_INSERT, type LimitSchema } from './limit.ts';
import { insertOrders, KIND, ORDERS_DDL } from './orders.ts';
import type { BenchServer } from './server.ts';

export interface DueDatabase {
  pool: pg.Pool;
  drop(): Promise<void>;
}

/** label: the database name's prefix; shardSize: the kind's (capped at 100,000); poolMax: the pool's size. */
export async function dueDatabase(
  server: BenchServer,
  args: { label: string; n: number; schema: LimitSchema; shardSize: number; poolMax: number },
): Promise<DueDatabase> {
  const db = await server.createDatabase(args.label);
  const pool = new pg.Pool({ connectionString: db.url, max: args.poolMax });
  pool.on('error', () => {});
  await migrate(pool, pino({ level: 'silent' }));
  await pool.query(`INSERT INTO timeout_center.kinds (kind, shard_size) VALUES ($1, $2)`, [KIND, Math.min(args.shardSize, 100_000)]);
  await pool.query(ORDERS_DDL);
  await insertOrders(pool, 1, args.n, new Date());
  if (args.schema === 'minimal') {
    await pool.query(MINIMAL_DDL);
    await pool.query(MINIMAL_INSERT, [1, args.n, new Date(Date.now() - 1000)]);
  } else {
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $2, i::text, now() - interval '1 s' FROM generate_series(1, $1::int) i`,
      [args.n, KIND],
    );
  }
  await pool.query('VACUUM ANALYZE');
  await pool.query('CHECKPOINT');
  return {
    pool,
    drop: async () => {
      await pool.end();
      await db.drop();
    },
  };
}
