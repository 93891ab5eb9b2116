-- set_kind_controls: one change of a kind's flow controls (kind-controls.ts: pause, resume, limit,
-- reset), in a transaction whose actor is set: the kinds_controls_audit trigger (sql/0006) records
-- what changed. A control not changed is written as it is, which the trigger does not count as a
-- change. Reset puts the config_* values back and lets later config changes apply
-- (controls_source 'config').
--   $1 kind   $2 paused (NULL: unchanged)   $3 change max running shards (boolean)
--   $4 max running shards (NULL: none)   $5 change the rate limit (boolean)
--   $6 rate limit (timeouts/s; NULL: none)   $7 reset to the config's values (boolean)
--   $8 controls_source: 'operator' or 'config'
-- @params kind: string, paused: boolean | null, setMaxRunningShards: boolean, maxRunningShards: number | null,
-- @params setRateLimit: boolean, rateLimit: number | null, reset: boolean, source: 'config' | 'operator'
-- The row count is 0 for an unknown kind.
UPDATE timeout_center.kinds
   SET paused = CASE WHEN $7 THEN config_paused ELSE coalesce($2, paused) END,
       max_running_shards = CASE WHEN $7 THEN config_max_running_shards WHEN $3 THEN $4 ELSE max_running_shards END,
       rate_limit = CASE WHEN $7 THEN config_rate_limit WHEN $5 THEN $6 ELSE rate_limit END,
       controls_source = $8
 WHERE kind = $1
