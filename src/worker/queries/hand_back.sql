-- hand_back: deliveries a stopping worker read but never started: their shards, still queued, are
-- marked unpublished so the leader republishes them within a second (worker.ts handBack).
--   $1 shard ids (int8[])
-- @params shardIds: number[]
UPDATE timeout_center.shards SET published_at = NULL WHERE id = ANY($1::int8[]) AND state = 'queued'
