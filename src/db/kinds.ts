// Writes the config's kinds into timeout_center.kinds, the table that timeouts reference: an
// INSERT of a kind no config declared fails on the foreign key.
import type pg from 'pg';
import type { Config } from '../config.js';

export async function syncKinds(pool: pg.Pool, kinds: Config['kinds']): Promise<void> {
  const names = Object.keys(kinds);
  const list = Object.values(kinds);
  await pool.query(
    `INSERT INTO timeout_center.kinds AS k (kind, shard_size, max_attempts, backoff_ms, handler_type, description)
     SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::text[], $6::text[])
     ON CONFLICT (kind) DO UPDATE SET
       shard_size = EXCLUDED.shard_size, max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms,
       handler_type = EXCLUDED.handler_type, description = EXCLUDED.description, updated_at = now()
     WHERE (k.shard_size, k.max_attempts, k.backoff_ms, k.handler_type, k.description)
           IS DISTINCT FROM (EXCLUDED.shard_size, EXCLUDED.max_attempts, EXCLUDED.backoff_ms, EXCLUDED.handler_type, EXCLUDED.description)`,
    [
      names,
      list.map((k) => k.shardSize),
      list.map((k) => k.maxAttempts),
      list.map((k) => k.backoffMs),
      list.map((k) => k.handler.type),
      list.map((k) => k.description ?? null),
    ],
  );
}
