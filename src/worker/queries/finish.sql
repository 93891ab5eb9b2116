-- finish: records the exceptions to claim.sql's plain form and closes the shard, in one statement.
-- Skipped timeouts (the handler changed nothing, e.g. already paid) keep state done with result
-- skipped (the batch form of claim.sql wrote that already and passes only their number in $9);
-- failed ones go back to pending with a backoff, or become failed once out of attempts (at once
-- when the failure is permanent).
--   $1 shard id   $2 skipped timeout ids (bigint[])   $3 failed timeout ids (bigint[])
--   $4 their errors (text[])   $5 their permanence (boolean[])   $6 max attempts
--   $7 backoff base (ms)   $8 timeouts the shard claimed (int)
--   $9 timeouts claim.sql already marked skipped (int)
-- Returns the shard's counts.
WITH failure AS (
  SELECT * FROM unnest($3::bigint[], $4::text[], $5::boolean[]) AS f (id, error, permanent)
), skipped AS (
  UPDATE timeout_center.timeouts SET result = 'skipped' WHERE id = ANY ($2::bigint[])
  RETURNING id
), failed AS (
  UPDATE timeout_center.timeouts t
     SET state = CASE WHEN f.permanent OR t.attempts >= $6 THEN 'failed' ELSE 'pending' END,
         result = NULL,
         last_error = f.error,
         available_at = CASE WHEN f.permanent OR t.attempts >= $6 THEN t.available_at
                             ELSE statement_timestamp() + least($7 * power(2, t.attempts - 1), 600000) * interval '1 millisecond' END,
         finished_at = CASE WHEN f.permanent OR t.attempts >= $6 THEN statement_timestamp() END
    FROM failure f
   WHERE t.id = f.id
  RETURNING t.state, t.last_error
), counts AS (
  SELECT (SELECT count(*) FROM skipped)::int + $9 AS skipped,
         (SELECT count(*) FROM failed WHERE state = 'failed')::int AS failed,
         (SELECT count(*) FROM failed WHERE state = 'pending')::int AS retried,
         (SELECT min(last_error) FROM failed) AS error_sample
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = statement_timestamp(), lease_expires_at = NULL, size = $8,
       done_count = $8 - c.skipped - c.failed - c.retried, skipped_count = c.skipped,
       failed_count = c.failed, retried_count = c.retried, error_sample = c.error_sample
  FROM counts c
 WHERE sh.id = $1
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried
