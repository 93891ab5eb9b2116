-- rotate_history: the history's daily partitions (sql/0050): those up to $2 days after today
-- created, those wholly older than $1 ms ago detached and dropped, each change waiting at most $3
-- ms for its locks and otherwise left to the next run. Nothing on an unpartitioned history.
--   $1 age (ms)   $2 days ahead   $3 lock_timeout (ms)
-- @params ageMs: number, daysAhead: number, lockTimeoutMs: number
-- Returns one row per change: action (created, dropped, skipped), partition, est_rows, detail.
SELECT r.action, r.partition_name, r.est_rows::float8 AS est_rows, r.detail
  FROM timeout_center.rotate_history(now() - $1 * interval '1 millisecond', $2::int, $3::int) r
