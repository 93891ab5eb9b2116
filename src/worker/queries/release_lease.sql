-- release_lease: gives a lease back so another worker can take the shard at once (lease.ts): the
-- shard is queued again, unpublished, and the attempt is not counted.
--   $1 shard id   $2 lease token
-- @params shardId: number, leaseToken: string
UPDATE timeout_center.shards SET state = 'queued', owner = NULL, lease_token = NULL, lease_expires_at = NULL,
       attempts = attempts - 1, published_at = NULL
 WHERE id = $1 AND lease_token = $2
