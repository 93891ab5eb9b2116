-- count_purgeable, Citus form: as citus/purge_scans.sql, the scans with failed timeouts read first.
-- Keep in step with count_purgeable.sql.
-- count_purgeable: what purge would delete now (`timeout-center purge --dry-run`).
--   $1 timeouts age (ms)   $2 scans age (ms)
-- @params timeoutsAgeMs: number, scansAgeMs: number
WITH failed_scans AS MATERIALIZED (
  SELECT DISTINCT sh.scan_id FROM timeout_center.shards sh
   WHERE sh.id IN (SELECT t.shard_id FROM timeout_center.timeouts t WHERE t.state = 'failed' AND t.shard_id IS NOT NULL)
)
SELECT
  ((SELECT count(*) FROM timeout_center.timeouts
     WHERE state IN ('done', 'cancelled') AND finished_at < now() - $1 * interval '1 millisecond')
   + (SELECT count(*) FROM timeout_center.done_timeouts
       WHERE finished_at < now() - $1 * interval '1 millisecond'))::int8 AS timeouts,
  (SELECT count(*) FROM timeout_center.scans c
    WHERE c.state = 'reduced' AND c.reduced_at < now() - $2 * interval '1 millisecond'
      AND (coalesce(c.failed, 0) = 0 OR NOT EXISTS (SELECT 1 FROM failed_scans f WHERE f.scan_id = c.id)))::int8 AS scans
