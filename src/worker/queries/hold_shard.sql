-- hold_shard: after take_lease.sql took nothing. A shard still queued was held back by flow
-- control (its kind is paused, or at its cap): it stays queued with published_at cleared, and the
-- coordinator publishes it again once the kind may run it (coordinator/queries/republish_queued.sql
-- leaves held-back shards alone meanwhile, so nothing bounces between Redis and the workers).
--   $1 shard id
-- @params shardId: number
-- Returns the shard when it was held back; no row: it was final or another worker's.
UPDATE timeout_center.shards SET published_at = NULL
 WHERE id = $1 AND state = 'queued'
RETURNING id, kind
