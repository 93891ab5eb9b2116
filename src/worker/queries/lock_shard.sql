-- lock_shard: first statement of the shard transaction. Holding this row lock keeps the reaper
-- and duplicate deliveries away until commit (they lock FOR UPDATE ... SKIP LOCKED, which
-- conflicts with it); FOR KEY SHARE rather than FOR UPDATE so the lease keeper can still extend
-- the lease (renew_lease.sql) while the transaction runs. No row means the lease was lost (the
-- reaper requeued the shard).
--   $1 shard id   $2 lease token
-- @params shardId: number, leaseToken: string
SELECT id FROM timeout_center.shards WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR KEY SHARE
