-- count_purgeable: what purge would delete now (`timeout-center purge --dry-run`).
--   $1 timeouts age (ms)   $2 scans age (ms)
-- @params timeoutsAgeMs: number, scansAgeMs: number
SELECT
  ((SELECT count(*) FROM timeout_center.timeouts
     WHERE state IN ('done', 'cancelled') AND finished_at < now() - $1 * interval '1 millisecond')
   + (SELECT count(*) FROM timeout_center.done_timeouts
       WHERE finished_at < now() - $1 * interval '1 millisecond'))::int8 AS timeouts,
  (SELECT count(*) FROM timeout_center.scans c
    WHERE c.state = 'reduced' AND c.reduced_at < now() - $2 * interval '1 millisecond'
      AND (coalesce(c.failed, 0) = 0
           OR NOT EXISTS (SELECT 1 FROM timeout_center.shards sh
                            JOIN timeout_center.timeouts t ON t.shard_id = sh.id AND t.state = 'failed'
                           WHERE sh.scan_id = c.id)))::int8 AS scans
