-- complete: records the outcome of every live timeout of the shard and of the shard itself, in
-- one statement. Ids the handler returned are 'applied', ids in $3 failed (retried with backoff,
-- or 'failed' once out of attempts), every other live id is 'skipped' (nothing to change).
--   $1 shard id   $2 applied biz_ids (text[])   $3 failed biz_ids (text[])   $4 their errors (text[])
--   $5 max attempts   $6 backoff base (ms)
-- Returns the shard's counts and the lateness (s) of every finished timeout.
WITH outcome AS (
  SELECT live.id, f.error, f.biz_id IS NOT NULL AS failed, a.biz_id IS NOT NULL AS applied
    FROM timeout_center.timeouts live
    LEFT JOIN unnest($3::text[], $4::text[]) AS f (biz_id, error) ON f.biz_id = live.biz_id
    LEFT JOIN (SELECT DISTINCT unnest($2::text[]) AS biz_id) a ON a.biz_id = live.biz_id
   WHERE live.shard_id = $1 AND live.state = 'dispatched'
), updated AS (
  UPDATE timeout_center.timeouts t
     SET state = CASE WHEN NOT o.failed THEN 'done' WHEN t.attempts + 1 >= $5 THEN 'failed' ELSE 'pending' END,
         result = CASE WHEN o.failed THEN NULL WHEN o.applied THEN 'applied' ELSE 'skipped' END,
         attempts = t.attempts + 1,
         last_error = o.error,
         available_at = CASE WHEN o.failed AND t.attempts + 1 < $5
                             THEN statement_timestamp() + least($6 * power(2, t.attempts), 600000) * interval '1 millisecond'
                             ELSE t.available_at END,
         finished_at = CASE WHEN NOT o.failed OR t.attempts + 1 >= $5 THEN statement_timestamp() END
    FROM outcome o
   WHERE t.id = o.id
  RETURNING t.state, t.result, t.last_error, extract(epoch FROM statement_timestamp() - t.due_at)::float8 AS lateness
), agg AS (
  SELECT count(*) FILTER (WHERE result = 'applied')::int AS done,
         count(*) FILTER (WHERE result = 'skipped')::int AS skipped,
         count(*) FILTER (WHERE state = 'failed')::int AS failed,
         count(*) FILTER (WHERE state = 'pending')::int AS retried,
         min(last_error) AS error_sample,
         coalesce(array_agg(lateness) FILTER (WHERE state = 'done'), '{}') AS lateness
    FROM updated
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = statement_timestamp(), lease_expires_at = NULL,
       done_count = agg.done, skipped_count = agg.skipped, failed_count = agg.failed,
       retried_count = agg.retried, error_sample = agg.error_sample
  FROM agg
 WHERE sh.id = $1
RETURNING agg.done, agg.skipped, agg.failed, agg.retried, agg.lateness
