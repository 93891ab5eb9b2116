-- requeue_expired: shards whose worker's lease ran out (the worker died or hung) go back to the
-- queue and are published again. A worker inside its transaction holds the shard's row lock, so
-- SKIP LOCKED never takes a shard from a worker that is still committing.
--   $1 max shards
--   $2 the oldest shard id in flight (claim-floors.ts; sql/0042): the shards below it are final
-- @params maxShards: number, shardsFrom: number
-- Returns (id, scan_id, kind) to publish.
UPDATE timeout_center.shards sh
   SET state = 'queued', owner = NULL, lease_token = NULL, lease_expires_at = NULL,
       published_at = now(), publish_count = publish_count + 1
 WHERE sh.id IN (SELECT id FROM timeout_center.shards
                  WHERE state = 'running' AND lease_expires_at < now() AND id >= $2
                  ORDER BY id LIMIT $1
                    FOR UPDATE SKIP LOCKED)
RETURNING sh.id, sh.scan_id, sh.kind
