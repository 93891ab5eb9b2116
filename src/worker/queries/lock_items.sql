-- lock_items: the shard's timeouts that are still live, locked in id order (no deadlocks with a
-- concurrent cancel). A timeout cancelled before this point is not here and never acts.
--   $1 shard id
SELECT id, biz_id, payload FROM timeout_center.timeouts
 WHERE shard_id = $1 AND state = 'dispatched'
 ORDER BY id
   FOR UPDATE
