-- sync_targets: writes the config's business databases into timeout_center.targets (targets.ts, in
-- a transaction whose actor is "config"): the config's rate limit always goes to
-- config_rate_limit, and to rate_limit only while the target's controls_source is 'config'.
--   $1 names (text[])   $2 their rate limits (numeric[], NULL: none)
-- @params targets: string[], rateLimits: (number | null)[]
INSERT INTO timeout_center.targets AS t (target, rate_limit, config_rate_limit)
SELECT target, rate, rate FROM unnest($1::text[], $2::numeric[]) AS c (target, rate)
ON CONFLICT (target) DO UPDATE SET
  config_rate_limit = EXCLUDED.config_rate_limit, updated_at = now(),
  rate_limit = CASE WHEN t.controls_source = 'config' THEN EXCLUDED.rate_limit ELSE t.rate_limit END
WHERE t.config_rate_limit IS DISTINCT FROM EXCLUDED.config_rate_limit
   OR (t.controls_source = 'config' AND t.rate_limit IS DISTINCT FROM EXCLUDED.rate_limit)
