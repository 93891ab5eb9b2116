-- finish: writes the outcome of claim.sql's plain form and closes the shard, in one statement.
-- Plain form ($10: every timeout the shard claimed): each is written once. Applied and skipped
-- ones (the handler changed nothing, e.g. already paid) leave timeout_center.timeouts for
-- timeout_center.done_timeouts (sql/0010); failed ones stay, back to pending with a backoff, or
-- failed once out of attempts (at once when the failure is permanent). The batch form moved its
-- rows already and passes only how many it marked skipped ($9) and an empty $10.
--   $1 shard id   $2 skipped timeout ids (bigint[])   $3 failed timeout ids (bigint[])
--   $4 their errors (text[])   $5 their permanence (boolean[])   $6 max attempts
--   $7 backoff base (ms)   $8 timeouts the shard claimed (int)
--   $9 timeouts claim.sql already marked skipped (int)   $10 claimed timeout ids (bigint[])
-- @params shardId: number, skipped: string[], failed: string[], errors: string[], permanent: boolean[], maxAttempts: number,
-- @params backoffMs: number, claimed: number, skippedMarked: number, claimedIds: string[]
-- Times: clock_timestamp(), not the statement's start. This is the last statement of the shard's
-- transaction before COMMIT (in the batch form, in the COMMIT's own round trip), so the shard's
-- finished_at is when the shard committed, to within that COMMIT (its WAL flush); the rows this
-- statement writes get the time they were written (read once per write: one value for the
-- shard's rows), after their handler ran.
-- Returns the shard's counts.
WITH failure AS (
  SELECT * FROM unnest($3::bigint[], $4::text[], $5::boolean[]) AS f (id, error, permanent)
), taken AS (
  DELETE FROM timeout_center.timeouts t
   WHERE t.id = ANY ($10::bigint[]) AND NOT t.id = ANY ($3::bigint[])
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at,
            CASE WHEN t.id = ANY ($2::bigint[]) THEN 'skipped' ELSE 'applied' END AS result
), moved AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts + 1, $1, result, last_error, created_at, (SELECT clock_timestamp())
    FROM taken
  RETURNING result
), failed AS (
  UPDATE timeout_center.timeouts t
     SET state = CASE WHEN f.permanent OR t.attempts + 1 >= $6 THEN 'failed' ELSE 'pending' END,
         attempts = t.attempts + 1,
         shard_id = $1,
         result = NULL,
         last_error = f.error,
         available_at = CASE WHEN f.permanent OR t.attempts + 1 >= $6 THEN t.available_at
                             ELSE statement_timestamp() + least($7 * power(2, t.attempts), 600000) * interval '1 millisecond' END,
         finished_at = CASE WHEN f.permanent OR t.attempts + 1 >= $6 THEN (SELECT clock_timestamp()) END
    FROM failure f
   WHERE t.id = f.id
  RETURNING t.state, t.last_error
), counts AS (
  SELECT (SELECT count(*) FROM moved WHERE result = 'skipped')::int + $9 AS skipped,
         (SELECT count(*) FROM failed WHERE state = 'failed')::int AS failed,
         (SELECT count(*) FROM failed WHERE state = 'pending')::int AS retried,
         (SELECT min(last_error) FROM failed) AS error_sample
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL, size = $8,
       done_count = $8 - c.skipped - c.failed - c.retried, skipped_count = c.skipped,
       failed_count = c.failed, retried_count = c.retried, error_sample = c.error_sample
  FROM counts c
 WHERE sh.id = $1
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried
