-- marker_complete: runs in a business database: the run's outcome into its marker, in the same
-- transaction as the handler's effect (business-db.ts completeMarker).
--   $1 shard id   $2 applied biz_ids (text[])   $3 failed biz_ids (text[])   $4 their errors (text[])
--   $5 their permanence (boolean[])
-- @params shardId: number, applied: string[], failedIds: string[], failedErrors: string[], failedPermanent: boolean[]
UPDATE timeout_center.markers SET applied = $2::text[], failed_ids = $3::text[], failed_errors = $4::text[], failed_permanent = $5::boolean[]
 WHERE shard_id = $1
