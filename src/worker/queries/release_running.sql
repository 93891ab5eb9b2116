-- release_running: after a forced stop ended their sessions, this worker's running shards go back
-- to the queue at once (not after their lease), unpublished so the leader republishes them.
-- SKIP LOCKED: a shard whose transaction is still committing is left to the reaper.
--   $1 shard ids (int8[])   $2 worker id
-- @params shardIds: number[], workerId: string
-- Returns the shards released (id as text, kind).
UPDATE timeout_center.shards
   SET state = 'queued', owner = NULL, lease_token = NULL, lease_expires_at = NULL, published_at = NULL
 WHERE id IN (SELECT id FROM timeout_center.shards
               WHERE id = ANY($1::int8[]) AND owner = $2 AND state = 'running'
                 FOR UPDATE SKIP LOCKED)
RETURNING id::text, kind
