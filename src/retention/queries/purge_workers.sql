-- purge_workers: forgets worker processes not seen for more than $1 ms (stopped or dead).
--   $1 age (ms)
-- @params ageMs: number
DELETE FROM timeout_center.workers WHERE last_seen_at < now() - $1 * interval '1 millisecond'
