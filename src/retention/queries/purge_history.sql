-- purge_history: one batch of up to $2 rows older than $1 ms deleted from the history partitions
-- that cannot be dropped whole yet (the old table of the conversion, the DEFAULT partition;
-- sql/0050), through their BRIN index on finished_at, as purge_done_timeouts.sql does.
--   $1 age (ms)   $2 batch size
-- @params ageMs: number, batchSize: number
-- Returns n, the rows deleted.
SELECT timeout_center.purge_history(now() - $1 * interval '1 millisecond', $2::int)::float8 AS n
