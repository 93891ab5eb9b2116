-- marker_delete: runs in a business database, after the center recorded the outcome: the marker
-- has done its job (business-db.ts deleteMarker; best effort).
--   $1 shard id
-- @params shardId: number
DELETE FROM timeout_center.markers WHERE shard_id = $1
