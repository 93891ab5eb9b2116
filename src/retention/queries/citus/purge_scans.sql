-- purge_scans, Citus form: the scans with failed timeouts read first (failed_scans: Citus joins no
-- coordinator table to a distributed one inside a correlated subquery), then the same DELETE on
-- the coordinator. Keep in step with purge_scans.sql.
-- purge_scans: deletes up to $2 reduced scans whose reduce is more than $1 ms old; their shards go
-- with them (ON DELETE CASCADE, through the shards' (scan_id, kind, seq) index). A scan is kept
-- while failed timeouts of its shards remain, so `failed` and `retry --scan` keep their context.
--   $1 age (ms)   $2 batch size (scans; each may carry many shards)
-- @params ageMs: number, batchSize: number
-- Returns nothing; the row count is the number of scans deleted.
WITH failed_scans AS MATERIALIZED (
  -- the scans that still have failed timeouts: one multi-shard read of the failed rows' shards
  SELECT DISTINCT sh.scan_id FROM timeout_center.shards sh
   WHERE sh.id IN (SELECT t.shard_id FROM timeout_center.timeouts t WHERE t.state = 'failed' AND t.shard_id IS NOT NULL)
)
DELETE FROM timeout_center.scans s
 WHERE s.id IN (SELECT c.id FROM timeout_center.scans c
                 WHERE c.state = 'reduced'
                   AND c.reduced_at < now() - $1 * interval '1 millisecond'
                   AND (coalesce(c.failed, 0) = 0 OR NOT EXISTS (SELECT 1 FROM failed_scans f WHERE f.scan_id = c.id))
                 ORDER BY c.reduced_at
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED)
