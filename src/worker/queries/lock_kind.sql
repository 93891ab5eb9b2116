-- lock_kind: runs just before take_lease.sql, in its transaction, and only locks anything when the
-- shard's kind is capped (max_running_shards). Workers taking shards of a capped kind then pass
-- one at a time, and take_lease.sql, a statement later, counts the running shards with every
-- earlier taker's commit visible (READ COMMITTED takes a new snapshot per statement), so the cap
-- holds fleet-wide. FOR NO KEY UPDATE does not block the FOR KEY SHARE of a timeout's INSERT.
--   $1 shard id
-- @params shardId: number
SELECT 1 FROM timeout_center.kinds k
 WHERE k.kind = (SELECT sh.kind FROM timeout_center.shards sh WHERE sh.id = $1)
   AND k.max_running_shards IS NOT NULL
   FOR NO KEY UPDATE OF k
