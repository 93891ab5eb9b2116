-- marker_token: runs in a business database: the lease token of a shard's marker (a run's, or the
-- split tombstone's), after marker_tombstone.sql found one there.
--   $1 shard id
-- @params shardId: number
SELECT lease_token FROM timeout_center.markers WHERE shard_id = $1
