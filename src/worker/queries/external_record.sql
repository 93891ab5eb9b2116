-- external_record: the center's record of an external shard run, after the handler's own commit
-- (or after the whole batch failed). Writes each dispatched timeout of the shard once more and
-- closes the shard with its counts, only while the lease is ours. Done timeouts move to
-- timeout_center.done_timeouts (sql/0010); the others stay in timeout_center.timeouts.
--   Applied biz_ids: done, result applied. Failed biz_ids (row-level: reported by the handler,
--   or isolated by splitting): back to pending with a backoff, or failed once out of attempts
--   (at once when permanent). The others: done, result skipped (nothing to change).
--   A batch-level failure ($9 not NULL: the target was down, answered 5xx/401/429, timed out,
--   replied nonsense, or its breaker is open): every row goes back to pending, due again in $9
--   ms, and the attempt is not counted: such a failure never fails a timeout for good.
--   Rows the run did not handle ($11, the marker's `ran`, does not name them): back to pending,
--   due now, the attempt not counted; never recorded as skipped.
--   Every write re-checks that the row is still this shard's and dispatched: a row another
--   transaction changed since `rows` read it (under READ COMMITTED the DELETE and UPDATE re-check
--   only their own WHERE after waiting for its lock) is left as that transaction left it.
--   $1 shard id   $2 lease token   $3 applied biz_ids (text[])   $4 failed biz_ids (text[])
--   $5 their errors (text[])   $6 their permanence (boolean[])   $7 max attempts
--   $8 backoff base (ms)   $9 batch retry delay (ms, NULL when the batch ran)   $10 batch error
--   $11 the biz_ids the run handled (text[]; NULL: every row the shard holds)
-- @params shardId: number, leaseToken: string, applied: string[], failedIds: string[], failedErrors: string[],
-- @params failedPermanent: boolean[], maxAttempts: number, backoffMs: number, batchRetryMs: number | null,
-- @params batchError: string | null, ran: string[] | null
-- Returns the shard's counts; no row when the lease is no longer ours.
WITH ours AS MATERIALIZED (
  SELECT sh.id FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
     FOR UPDATE
), failure AS (
  SELECT * FROM unnest($4::text[], $5::text[], $6::boolean[]) AS f (biz_id, error, permanent)
), rows AS (
  SELECT t.id, t.attempts, f.error, f.permanent, f.biz_id IS NOT NULL AS failed, t.biz_id = ANY ($3::text[]) AS applied,
         ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) AS covered
    FROM timeout_center.timeouts t
    LEFT JOIN failure f ON f.biz_id = t.biz_id
   WHERE t.shard_id = $1 AND t.state = 'dispatched' AND EXISTS (SELECT 1 FROM ours)
), moved AS (
  -- Done (applied, or skipped: nothing to change): out of the hot table, into the history.
  DELETE FROM timeout_center.timeouts t
   USING rows r
   WHERE t.id = r.id AND t.shard_id = $1 AND t.state = 'dispatched' AND $9::int IS NULL AND NOT r.failed AND r.covered
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.shard_id, t.last_error, t.created_at,
            CASE WHEN r.applied THEN 'applied' ELSE 'skipped' END AS result
), archived AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, statement_timestamp()
    FROM moved
  RETURNING 'done'::text AS state, result, NULL::text AS last_error
), kept AS (
  -- Failed, or the whole batch failed, or not handled by the run: stays, pending again or failed.
  UPDATE timeout_center.timeouts t
     SET state = CASE WHEN $9::int IS NOT NULL OR NOT r.covered THEN 'pending'
                      WHEN r.permanent OR r.attempts >= $7 THEN 'failed'
                      ELSE 'pending' END,
         result = NULL,
         attempts = CASE WHEN $9::int IS NOT NULL OR NOT r.covered THEN greatest(t.attempts - 1, 0) ELSE t.attempts END,
         last_error = CASE WHEN $9::int IS NOT NULL THEN $10 WHEN NOT r.covered THEN t.last_error ELSE r.error END,
         available_at = CASE WHEN $9::int IS NOT NULL THEN statement_timestamp() + $9::int * interval '1 millisecond'
                             WHEN NOT r.covered THEN statement_timestamp()
                             WHEN NOT (r.permanent OR r.attempts >= $7)
                               THEN statement_timestamp() + least($8 * power(2, r.attempts - 1), 600000) * interval '1 millisecond'
                             ELSE t.available_at END,
         finished_at = CASE WHEN $9::int IS NULL AND r.covered AND (r.permanent OR r.attempts >= $7) THEN statement_timestamp() END
    FROM rows r
   WHERE t.id = r.id AND t.shard_id = $1 AND t.state = 'dispatched' AND ($9::int IS NOT NULL OR r.failed OR NOT r.covered)
  RETURNING t.state, t.result, t.last_error
), written AS (
  SELECT * FROM archived UNION ALL SELECT * FROM kept
), counts AS (
  SELECT count(*)::int AS n,
         count(*) FILTER (WHERE result = 'applied')::int AS done,
         count(*) FILTER (WHERE result = 'skipped')::int AS skipped,
         count(*) FILTER (WHERE state = 'failed')::int AS failed,
         count(*) FILTER (WHERE state = 'pending')::int AS retried,
         min(last_error) FILTER (WHERE state IN ('failed', 'pending')) AS error_sample
    FROM written
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = statement_timestamp(), lease_expires_at = NULL, size = c.n,
       done_count = c.done, skipped_count = c.skipped, failed_count = c.failed, retried_count = c.retried,
       error_sample = c.error_sample
  FROM counts c, ours o
 WHERE sh.id = o.id
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried
