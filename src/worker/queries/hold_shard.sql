-- hold_shard: after take_lease.sql took nothing, why. A shard still queued whose kind flow control
-- holds back (paused, or at its cap of running shards: take_lease.sql's own test) stays queued with
-- published_at cleared, and the coordinator publishes it again once the kind may run it
-- (coordinator/queries/republish_queued.sql leaves held-back shards alone meanwhile, so nothing
-- bounces between Redis and the workers): held. A shard still queued that flow control does not
-- hold had its row locked for a moment when the lease skipped it (the coordinator's floor refresh
-- in next_due.sql, its reap): this statement waits for that lock, writes nothing, and the worker
-- leases again (executor.ts): not held. Unpublishing it, as this statement once did, left it
-- waiting for the next reap (a second; without a coordinator, for good).
--   $1 shard id
-- @params shardId: number
-- Returns the shard (id, kind, held) while it is queued; no row: it was final or another worker's.
WITH queued AS (
  SELECT sh.id, sh.kind,
         k.paused OR (k.max_running_shards IS NOT NULL
                      AND (SELECT count(*) FROM timeout_center.shards r WHERE r.kind = sh.kind AND r.state = 'running') >= k.max_running_shards) AS held
    FROM timeout_center.shards sh
    JOIN timeout_center.kinds k ON k.kind = sh.kind
   WHERE sh.id = $1 AND sh.state = 'queued'
     FOR UPDATE OF sh
), unpublished AS (
  UPDATE timeout_center.shards sh SET published_at = NULL
    FROM queued q
   WHERE sh.id = q.id AND q.held
  RETURNING sh.id
)
SELECT q.id, q.kind, q.held FROM queued q
