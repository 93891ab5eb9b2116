-- finish, Citus form: finish.sql with the timeouts part in the shard's bucket ($11), so each
-- write routes to one worker node (see citus/claim.sql); the shard row is on the coordinator.
-- Keep in step with finish.sql.
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
--   $11 the shard's bucket
-- @params backoffMs: number, claimed: number, skippedMarked: number, claimedIds: string[], bucket: number
-- Returns the shard's counts.
WITH failure AS (
  -- the statement's time as a column, and the backoff as arithmetic on its epoch (to_timestamp
  -- of a number is IMMUTABLE, timestamptz + interval is not): Citus takes no STABLE function
  -- inside a CASE of a modification it sends to a worker node
  SELECT f.*, statement_timestamp() AS at, extract(epoch FROM statement_timestamp())::float8 AS at_s FROM unnest($3::bigint[], $4::text[], $5::boolean[]) AS f (id, error, permanent)
), taken AS (
  DELETE FROM timeout_center.timeouts t
   WHERE t.bucket = $11 AND t.id = ANY ($10::bigint[]) AND NOT t.id = ANY ($3::bigint[])
  RETURNING t.bucket, t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at,
            CASE WHEN t.id = ANY ($2::bigint[]) THEN 'skipped' ELSE 'applied' END AS result
), moved AS (
  INSERT INTO timeout_center.done_timeouts (bucket, id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT bucket, id, kind, biz_id, due_at, payload, attempts + 1, $1, result, last_error, created_at, statement_timestamp()
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
                             ELSE to_timestamp(f.at_s + least($7 * power(2, t.attempts), 600000) / 1000.0) END,
         finished_at = CASE WHEN f.permanent OR t.attempts + 1 >= $6 THEN f.at END
    FROM failure f
   WHERE t.bucket = $11 AND t.id = f.id
  RETURNING t.state, t.last_error
), counts AS (
  SELECT (SELECT count(*) FROM moved WHERE result = 'skipped')::int + $9 AS skipped,
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
