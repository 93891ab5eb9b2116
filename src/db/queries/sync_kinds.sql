-- sync_kinds: writes the config's kinds into timeout_center.kinds (kinds.ts, in a transaction
-- whose actor is "config"): the flow controls always go to the config_* columns, and to the live
-- columns only while the kind's controls_source is 'config'. An unchanged kind is not written.
--   $1 kinds (text[])   $2 shard sizes (int[])   $3 max attempts (int[])   $4 backoff (ms, int[])
--   $5 handler types (text[])   $6 descriptions (text[])   $7 paused (boolean[])
--   $8 max running shards (int[])   $9 rate limits (numeric[])
--   $10 settle statements (text[]: the SQL handler as timeout_center.settle runs it, or NULL; sql/0021)
-- @params kinds: string[], shardSizes: number[], maxAttempts: number[], backoffMs: number[], handlerTypes: string[],
-- @params descriptions: (string | null)[], paused: boolean[], maxRunningShards: (number | null)[], rateLimits: (number | null)[],
-- @params settleStatements: (string | null)[]
INSERT INTO timeout_center.kinds AS k (kind, shard_size, max_attempts, backoff_ms, handler_type, description,
                                       paused, max_running_shards, rate_limit,
                                       config_paused, config_max_running_shards, config_rate_limit, settle_statement)
SELECT kind, shard_size, max_attempts, backoff_ms, handler_type, description, paused, cap, rate, paused, cap, rate, settle
  FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::text[], $6::text[], $7::boolean[], $8::int[], $9::numeric[], $10::text[])
         AS c (kind, shard_size, max_attempts, backoff_ms, handler_type, description, paused, cap, rate, settle)
ON CONFLICT (kind) DO UPDATE SET
  shard_size = EXCLUDED.shard_size, max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms,
  handler_type = EXCLUDED.handler_type, description = EXCLUDED.description, updated_at = now(),
  config_paused = EXCLUDED.config_paused, config_max_running_shards = EXCLUDED.config_max_running_shards,
  config_rate_limit = EXCLUDED.config_rate_limit, settle_statement = EXCLUDED.settle_statement,
  paused = CASE WHEN k.controls_source = 'config' THEN EXCLUDED.paused ELSE k.paused END,
  max_running_shards = CASE WHEN k.controls_source = 'config' THEN EXCLUDED.max_running_shards ELSE k.max_running_shards END,
  rate_limit = CASE WHEN k.controls_source = 'config' THEN EXCLUDED.rate_limit ELSE k.rate_limit END
WHERE (k.shard_size, k.max_attempts, k.backoff_ms, k.handler_type, k.description,
       k.config_paused, k.config_max_running_shards, k.config_rate_limit, k.settle_statement)
      IS DISTINCT FROM (EXCLUDED.shard_size, EXCLUDED.max_attempts, EXCLUDED.backoff_ms, EXCLUDED.handler_type, EXCLUDED.description,
                        EXCLUDED.config_paused, EXCLUDED.config_max_running_shards, EXCLUDED.config_rate_limit, EXCLUDED.settle_statement)
   OR (k.controls_source = 'config'
       AND (k.paused, k.max_running_shards, k.rate_limit) IS DISTINCT FROM (EXCLUDED.paused, EXCLUDED.max_running_shards, EXCLUDED.rate_limit))
