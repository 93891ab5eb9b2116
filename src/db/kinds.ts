// Writes the config's kinds into timeout_center.kinds, the table that timeouts reference: an
// INSERT of a kind no config declared fails on the foreign key.
//
// Flow control (paused, max_running_shards, rate_limit): the config's values always go to the
// config_* columns (what `limit <kind> --reset` restores), and to the live columns only while the
// kind's controls_source is 'config'; a change made at run time (controls_source 'operator')
// survives restarts. A change of the live columns is audited by the kinds_controls_audit trigger
// (sql/0006) with the actor "config".
import type pg from 'pg';
import type { Config } from '../config.js';

export async function syncKinds(pool: pg.Pool, kinds: Config['kinds']): Promise<void> {
  const names = Object.keys(kinds);
  const list = Object.values(kinds);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SELECT set_config('timeout_center.actor', 'config', true)`);
    await client.query(
      `INSERT INTO timeout_center.kinds AS k (kind, shard_size, max_attempts, backoff_ms, handler_type, description,
                                              paused, max_running_shards, rate_limit,
                                              config_paused, config_max_running_shards, config_rate_limit)
       SELECT kind, shard_size, max_attempts, backoff_ms, handler_type, description, paused, cap, rate, paused, cap, rate
         FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::text[], $6::text[], $7::boolean[], $8::int[], $9::numeric[])
                AS c (kind, shard_size, max_attempts, backoff_ms, handler_type, description, paused, cap, rate)
       ON CONFLICT (kind) DO UPDATE SET
         shard_size = EXCLUDED.shard_size, max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms,
         handler_type = EXCLUDED.handler_type, description = EXCLUDED.description, updated_at = now(),
         config_paused = EXCLUDED.config_paused, config_max_running_shards = EXCLUDED.config_max_running_shards,
         config_rate_limit = EXCLUDED.config_rate_limit,
         paused = CASE WHEN k.controls_source = 'config' THEN EXCLUDED.paused ELSE k.paused END,
         max_running_shards = CASE WHEN k.controls_source = 'config' THEN EXCLUDED.max_running_shards ELSE k.max_running_shards END,
         rate_limit = CASE WHEN k.controls_source = 'config' THEN EXCLUDED.rate_limit ELSE k.rate_limit END
       WHERE (k.shard_size, k.max_attempts, k.backoff_ms, k.handler_type, k.description,
              k.config_paused, k.config_max_running_shards, k.config_rate_limit)
             IS DISTINCT FROM (EXCLUDED.shard_size, EXCLUDED.max_attempts, EXCLUDED.backoff_ms, EXCLUDED.handler_type, EXCLUDED.description,
                               EXCLUDED.config_paused, EXCLUDED.config_max_running_shards, EXCLUDED.config_rate_limit)
          OR (k.controls_source = 'config'
              AND (k.paused, k.max_running_shards, k.rate_limit) IS DISTINCT FROM (EXCLUDED.paused, EXCLUDED.max_running_shards, EXCLUDED.rate_limit))`,
      [
        names,
        list.map((k) => k.shardSize),
        list.map((k) => k.maxAttempts),
        list.map((k) => k.backoffMs),
        list.map((k) => k.handler.type),
        list.map((k) => k.description ?? null),
        list.map((k) => k.paused),
        list.map((k) => k.maxRunningShards ?? null),
        list.map((k) => k.rateLimit ?? null),
      ],
    );
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
