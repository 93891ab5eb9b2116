-- lock_shard: first statement of the shard transaction. Holding this row lock keeps the reaper
-- away until commit; no row means the lease was lost (the reaper requeued the shard).
--   $1 shard id   $2 lease token
SELECT id FROM timeout_center.shards WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR UPDATE
