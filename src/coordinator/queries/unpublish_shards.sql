-- unpublish_shards: queued shards whose delivery sat with a gone worker (read ahead, never
-- leased; recovery.ts acknowledged it in Redis) are marked unpublished, so republish_queued.sql,
-- later in the same transaction, publishes them again at once (or holds them for flow control).
-- A shard running under a gone worker's lease is expire_gone.sql's; one running under a live
-- worker or final is left alone.
--   $1 shard ids (bigint[])
-- @params shardIds: number[]
UPDATE timeout_center.shards SET published_at = NULL
 WHERE id = ANY ($1::bigint[]) AND state = 'queued'
RETURNING id
