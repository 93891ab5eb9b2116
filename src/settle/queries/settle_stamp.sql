-- settle_stamp: after a settle's shard recorded its timeout (settler.ts), the history row names
-- the settler, as an in-database settle's does (done_timeouts.settled_by, from shards.settled_by;
-- sql/0023). Then reads what the timeout became.
--   $1 timeout id   $2 shard id
-- @params timeoutId: number, shardId: number
-- Returns the timeout's state, result, last_error, available_at and settled_by (no row: purged).
WITH stamped AS (
  UPDATE timeout_center.done_timeouts d SET settled_by = sh.settled_by
    FROM timeout_center.shards sh
   WHERE d.id = $1 AND d.shard_id = $2 AND sh.id = $2 AND d.settled_by IS NULL
  RETURNING d.id, d.settled_by
)
SELECT a.state, a.result, a.last_error, a.available_at, coalesce(s.settled_by, a.settled_by) AS settled_by
  FROM timeout_center.all_timeouts a LEFT JOIN stamped s ON s.id = a.id
 WHERE a.id = $1
