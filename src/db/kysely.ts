import { Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import type { Database } from './schema.js';

/** A kysely instance over an existing pool. Its destroy() ends that pool: call it only where
 *  the pool has no other user. */
export function createKysely(pool: pg.Pool): Kysely<Database> {
  return new Kysely<Database>({
    dialect: new PostgresDialect({
      pool,
    }),
  });
}
