-- center_controls: the flow controls of a store's kinds as the center's database holds them (the
-- one source of truth: CLI, console and SQL change them there). Read by each store's leader
-- (stores/shared-controls.ts).
--   $1 the store's kinds (text[])
-- @params kinds: string[]
-- Returns kind, paused, max_running_shards (int or NULL), rate_limit (float8 or NULL).
SELECT kind, paused, max_running_shards, rate_limit::float8 AS rate_limit
  FROM timeout_center.kinds
 WHERE kind = ANY ($1::text[])
