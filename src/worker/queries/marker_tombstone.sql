-- marker_tombstone: runs in a business database, before a shard's held rows are split (business-db.ts
-- fenceForSplit): a marker with nothing applied under the shard's id, so no other run of the shard
-- can commit there afterwards. No row: a marker is there already (marker_token.sql tells whose).
--   $1 shard id   $2 the tombstone's lease token (SPLIT_TOMBSTONE)
-- @params shardId: number, leaseToken: string
INSERT INTO timeout_center.markers (shard_id, lease_token, applied) VALUES ($1, $2, '{}')
ON CONFLICT (shard_id) DO NOTHING RETURNING shard_id
