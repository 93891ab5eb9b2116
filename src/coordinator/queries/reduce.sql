-- reduce: every mapped scan whose shards are all final gets its totals, exactly once: the
-- state moves mapped -> reduced in this one conditional UPDATE.
--   $1 max scans
--   $2 the oldest scan not reduced at an earlier tick (claim-floors.ts; 0 from the first): a scan
--      enters mapped only when written (a new, higher id) or from mapping, so the scans below it
--      are reduced, and the versions they left in scans_open under an old snapshot held elsewhere
--      are not walked at every tick
--   $3 the oldest shard in flight at an earlier tick (the same for shards: the planner looks for a
--      scan's shards in flight on shards_in_flight_by_id, which under an old snapshot holds a
--      version of every shard since it was taken)
--   $4 the server $2 and $3 were computed on (next_due.sql's column server): on another one they
--      are left out. A standby promoted without the last commits may have below them scans open
--      again and shards back in flight, and a scan whose shards are in flight must not be reduced.
-- @params maxScans: number, scansFrom: number, shardsFrom: number, server: string
-- claimed is the sum of what the scan's shards claimed (workers claim their rows).
-- Returns the reduced scans with totals.
WITH inputs AS MATERIALIZED (
  SELECT CASE WHEN same THEN $2::bigint ELSE 0 END AS scans_from, CASE WHEN same THEN $3::bigint ELSE 0 END AS shards_from
    FROM (SELECT pg_postmaster_start_time()::text || coalesce(' ' || host(inet_server_addr()) || ':' || inet_server_port()::text, '')
                 = $4::text AS same) x
), ready AS (
  SELECT s.id FROM timeout_center.scans s
   WHERE s.state = 'mapped' AND s.id >= (SELECT i.scans_from FROM inputs i)
     AND NOT EXISTS (SELECT 1 FROM timeout_center.shards sh
                      WHERE sh.scan_id = s.id AND sh.state IN ('queued', 'running') AND sh.id >= (SELECT i.shards_from FROM inputs i))
   ORDER BY s.id
   LIMIT $1
     FOR UPDATE SKIP LOCKED
), totals AS (
  SELECT sh.scan_id, sum(sh.size)::int AS claimed,
         sum(sh.done_count)::int AS done, sum(sh.skipped_count)::int AS skipped,
         sum(sh.failed_count)::int AS failed, sum(sh.retried_count)::int AS retried,
         jsonb_agg(jsonb_build_object('shard', sh.id, 'kind', sh.kind, 'failed', sh.failed_count,
                                      'error', sh.error_sample) ORDER BY sh.id)
           FILTER (WHERE sh.failed_count > 0) AS failures
    FROM timeout_center.shards sh JOIN ready r ON r.id = sh.scan_id
   GROUP BY sh.scan_id
)
UPDATE timeout_center.scans s
   SET state = 'reduced', reduced_at = now(), claimed = coalesce(t.claimed, 0),
       done = coalesce(t.done, 0), skipped = coalesce(t.skipped, 0),
       failed = coalesce(t.failed, 0), retried = coalesce(t.retried, 0), failures = t.failures
  FROM ready r LEFT JOIN totals t ON t.scan_id = r.id
 WHERE s.id = r.id
RETURNING s.id, s.claimed, s.shard_count, s.done, s.skipped, s.failed, s.retried, s.failures,
          extract(epoch FROM s.reduced_at - s.started_at)::float8 AS duration_s
