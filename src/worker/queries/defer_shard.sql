-- defer_shard: an external shard that cannot tell whether an earlier run committed (its target
-- cannot be read now) keeps its rows and waits (external-executor.ts): its lease is set to end
-- after the retry delay and the attempt is not counted; the next run reads the marker.
--   $1 shard id   $2 lease token   $3 delay (ms)
-- @params shardId: number, leaseToken: string, delayMs: number
-- The row count is 0 when the lease is no longer ours.
UPDATE timeout_center.shards SET attempts = greatest(attempts - 1, 0), lease_expires_at = now() + $3 * interval '1 millisecond'
 WHERE id = $1 AND lease_token = $2 AND state = 'running'
