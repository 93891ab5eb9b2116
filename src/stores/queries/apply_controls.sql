-- apply_controls: a store's share of its kinds' controls, written into the store's own kinds table
-- where take_lease.sql and the store's leader read them. Only a changed row is written (the
-- kinds_controls_audit trigger of sql/0006 records the change in the store, with the actor the
-- caller set: "center").
--   $1 controls: [{kind, paused, max_running_shards, rate_limit}] (jsonb)
-- @params controls: string
UPDATE timeout_center.kinds k
   SET paused = c.paused, max_running_shards = c.max_running_shards, rate_limit = c.rate_limit
  FROM jsonb_to_recordset($1::jsonb) AS c (kind text, paused boolean, max_running_shards integer, rate_limit numeric)
 WHERE k.kind = c.kind
   AND (k.paused, k.max_running_shards, k.rate_limit) IS DISTINCT FROM (c.paused, c.max_running_shards, c.rate_limit)
