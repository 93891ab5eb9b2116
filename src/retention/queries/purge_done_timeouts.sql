-- purge_done_timeouts: deletes up to $2 done timeouts that finished more than $1 ms ago from the
-- history table (sql/0010_done_timeouts.sql). Rows arrive there in finish order, so the BRIN
-- index on finished_at finds the old ones in the first page ranges; the DELETE probes the primary
-- key for exactly those ids. Nothing updates a history row, so no row lock is needed first.
--   $1 age (ms)   $2 batch size
-- @params ageMs: number, batchSize: number
-- Returns nothing; the row count is the number deleted.
DELETE FROM timeout_center.done_timeouts d
 WHERE d.id = ANY (ARRAY(SELECT id FROM timeout_center.done_timeouts
                          WHERE finished_at < now() - $1 * interval '1 millisecond'
                          LIMIT $2))
