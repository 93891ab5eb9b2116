-- marker_insert: runs in a business database, first in a run's transaction there, before the
-- handler (business-db.ts insertMarker; table: business_markers.sql). The key is the shard's id:
-- while this transaction is open every other run of the shard waits here, and once it committed
-- every other run fails here (23505, markers_pkey).
--   $1 shard id   $2 lease token   $3 the biz_ids this run handles (text[])
-- @params shardId: number, leaseToken: string, ran: string[]
INSERT INTO timeout_center.markers (shard_id, lease_token, applied, ran) VALUES ($1, $2, '{}', $3::text[])
