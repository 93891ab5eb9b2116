-- purge_timeouts, Citus form: one bucket per batch ($3), so the FOR UPDATE SKIP LOCKED is a router
-- query (Citus locks rows in single-shard queries only); retention.ts runs it for every bucket.
-- Keep in step with purge_timeouts.sql.
-- purge_timeouts: deletes up to $2 cancelled timeouts (and done ones written before
-- sql/0010_done_timeouts.sql; done ones now live in done_timeouts: purge_done_timeouts.sql) that
-- finished more than $1 ms ago, oldest first, through the partial index timeouts_purgeable. Failed timeouts are never purged
-- (operators retry them). One short statement per batch: no long locks, and the dead tuples it
-- leaves are reclaimed by autovacuum and reused by new inserts.
--   $1 age (ms)   $2 batch size
--   $3 the bucket (Citus form: one batch per bucket)
-- @params ageMs: number, batchSize: number, bucket: number
-- Returns nothing; the row count is the number deleted.
DELETE FROM timeout_center.timeouts t
 WHERE t.bucket = $3 AND t.id IN (SELECT id FROM timeout_center.timeouts
                 WHERE bucket = $3 AND state IN ('done', 'cancelled')
                   AND finished_at < now() - $1 * interval '1 millisecond'
                 ORDER BY finished_at
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED)
