-- set_target_rate: one change of a business database's fleet-wide rate limit (target-controls.ts),
-- in a transaction whose actor is set: the targets_controls_audit trigger (sql/0009) records it.
-- Reset puts config_rate_limit back and lets later config changes apply (controls_source 'config').
--   $1 target   $2 rate limit (timeouts/s; NULL: none)   $3 reset to the config's value (boolean)
--   $4 controls_source: 'operator' or 'config'
-- @params target: string, rateLimit: number | null, reset: boolean, source: 'config' | 'operator'
-- The row count is 0 for an unknown business database.
UPDATE timeout_center.targets
   SET rate_limit = CASE WHEN $3 THEN config_rate_limit ELSE $2 END, controls_source = $4, updated_at = now()
 WHERE target = $1
