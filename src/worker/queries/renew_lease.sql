-- renew_lease: extends the lease of a shard this worker is running (lease-keeper.ts), on a
-- connection of its own while the shard's transaction works. The shard's transaction holds the
-- row FOR KEY SHARE (lock_shard.sql), which this lock does not wait for, while the reaper and
-- duplicate deliveries (FOR UPDATE ... SKIP LOCKED) still pass the row by. SKIP LOCKED: once the
-- shard's transaction writes its result (finish.sql) the row is left alone; the shard is ending.
--   $1 shard id   $2 lease token   $3 lease (ms)
-- @params shardId: number, leaseToken: string, leaseMs: number
-- Returns renewed (0 or 1) and held: false when the lease is lost (the reaper requeued the shard,
-- or the shard ended).
WITH target AS (
  SELECT id FROM timeout_center.shards
   WHERE id = $1 AND lease_token = $2 AND state = 'running'
     FOR NO KEY UPDATE SKIP LOCKED
), renewed AS (
  UPDATE timeout_center.shards s
     SET lease_expires_at = now() + $3 * interval '1 millisecond'
    FROM target
   WHERE s.id = target.id
  RETURNING s.id
)
SELECT (SELECT count(*) FROM renewed)::int AS renewed,
       EXISTS (SELECT 1 FROM timeout_center.shards WHERE id = $1 AND lease_token = $2 AND state = 'running') AS held
