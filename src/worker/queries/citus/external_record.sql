-- external_record, Citus form (src/db/citus-layout.ts; docs/scale.md "Citus: what runs"): the
-- timeouts part of external_record.sql, every read and write in the shard's bucket ($12), the
-- history rows carrying their bucket into the colocated done_timeouts shard. Runs in one
-- transaction between citus/worker/external_record_lock.sql (the shard's row under this run's
-- lease, FOR UPDATE: external_record.sql's `ours`) and citus/worker/external_close_shard.sql (the
-- shard's counts, from what this returns: the final UPDATE of external_record.sql).
-- What differs from one PostgreSQL: the shard's rows are its dispatched rows only (on Citus its
-- claim writes them dispatched and holds none pending: citus/worker/external_claim.sql says why),
-- so a row's attempt was counted by its claim; and the statement's time is a column (`clock`)
-- with the backoff as arithmetic on its epoch, because Citus takes no STABLE function inside a
-- CASE of a modification it sends to a worker node (as citus/worker/finish.sql).
-- Keep in step with external_record.sql.
-- external_record: the center's record of an external shard run, after the handler's own commit
-- (or after the whole batch failed). Writes each timeout of the shard and closes the shard with its
-- counts, only while the lease is ours. Done timeouts move to timeout_center.done_timeouts
-- (sql/0010); the others stay in timeout_center.timeouts.
--   Applied biz_ids: done, result applied. Failed biz_ids (row-level: reported by the handler,
--   or isolated by splitting): back to pending with a backoff, or failed once out of attempts
--   (at once when permanent). The others: done, result skipped (nothing to change).
--   A batch-level failure ($9 not NULL: the target was down, answered 5xx/401/429, timed out,
--   replied nonsense, or its breaker is open): every row goes back to pending, due again in $9
--   ms, and the attempt is not counted: such a failure never fails a timeout for good.
--   Rows the run did not handle ($11, the marker's `ran`, does not name them): back to pending,
--   due now, the attempt not counted; never recorded as skipped.
--   Every write re-checks that the row is still this shard's (dispatched): a row another
--   transaction changed since the statement's snapshot is left as that transaction left it.
--   $1 shard id   $2 lease token (checked by citus/worker/external_record_lock.sql: unused here)
--   $3 applied biz_ids (text[])   $4 failed biz_ids (text[])   $5 their errors (text[])
--   $6 their permanence (boolean[])   $7 max attempts   $8 backoff base (ms)
--   $9 batch retry delay (ms, NULL when the batch ran)   $10 batch error
--   $11 the biz_ids the run handled (text[]; NULL: every row the shard holds)   $12 the shard's bucket
-- @params shardId: number, leaseToken: string, applied: string[], failedIds: string[], failedErrors: string[],
-- @params failedPermanent: boolean[], maxAttempts: number, backoffMs: number, batchRetryMs: number | null,
-- @params batchError: string | null, ran: string[] | null, bucket: number
-- Times: this statement runs after the target's COMMIT (the commit that applied the rows), so the
-- rows it moves get its start (statement_timestamp()) as finished_at.
-- Returns one row: n (rows written), done, skipped, failed, retried, error_sample, and the rows'
-- lateness as external_record.sql's (lateness_ms, lateness_n, measured_ms: this statement's start).
WITH clock AS (
  SELECT statement_timestamp() AS at, extract(epoch FROM statement_timestamp())::float8 AS at_s, $2::text AS lease_token
), moved AS (
  -- Done (applied, or skipped: nothing to change): out of the hot table, into the history.
  DELETE FROM timeout_center.timeouts t
   WHERE t.bucket = $12 AND t.shard_id = $1 AND t.state = 'dispatched' AND $9::int IS NULL
     AND NOT t.biz_id = ANY ($4::text[]) AND ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[]))
  RETURNING t.bucket, t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at,
            CASE WHEN t.biz_id = ANY ($3::text[]) THEN 'applied' ELSE 'skipped' END AS result
), archived AS (
  INSERT INTO timeout_center.done_timeouts (bucket, id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT bucket, id, kind, biz_id, due_at, payload, attempts, $1, result, last_error, created_at, statement_timestamp()
    FROM moved
  RETURNING 'done'::text AS state, result, NULL::text AS last_error, due_at
), kept AS (
  -- Failed, or the whole batch failed, or not handled by the run: stays, pending again or failed.
  -- A failed row's error and permanence are at its biz_id's position in $4.
  UPDATE timeout_center.timeouts t
     SET state = CASE WHEN $9::int IS NOT NULL OR NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) THEN 'pending'
                      WHEN coalesce(($6::boolean[])[array_position($4::text[], t.biz_id)], false) OR t.attempts >= $7 THEN 'failed'
                      ELSE 'pending' END,
         result = NULL,
         -- the attempt was counted by the claim: given back when the batch failed or the run did
         -- not handle the row
         attempts = CASE WHEN $9::int IS NOT NULL OR NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[]))
                         THEN greatest(t.attempts - 1, 0) ELSE t.attempts END,
         shard_id = $1,
         last_error = CASE WHEN $9::int IS NOT NULL THEN $10
                           WHEN NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) THEN t.last_error
                           ELSE ($5::text[])[array_position($4::text[], t.biz_id)] END,
         available_at = CASE WHEN $9::int IS NOT NULL THEN to_timestamp(c.at_s + $9::int / 1000.0)
                             WHEN NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) THEN c.at
                             WHEN NOT (coalesce(($6::boolean[])[array_position($4::text[], t.biz_id)], false) OR t.attempts >= $7)
                               THEN to_timestamp(c.at_s + least($8 * power(2, t.attempts - 1), 600000) / 1000.0)
                             ELSE t.available_at END,
         finished_at = CASE WHEN $9::int IS NULL AND ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[]))
                             AND (coalesce(($6::boolean[])[array_position($4::text[], t.biz_id)], false) OR t.attempts >= $7)
                            THEN c.at END
    FROM clock c
   WHERE t.bucket = $12 AND t.shard_id = $1 AND t.state = 'dispatched'
     -- its fate is to stay (the DELETE's fate conditions, negated)
     AND ($9::int IS NOT NULL OR t.biz_id = ANY ($4::text[]) OR NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])))
  RETURNING t.state, t.result, t.last_error, t.due_at
), written AS MATERIALIZED (
  SELECT * FROM archived UNION ALL SELECT * FROM kept
), late AS (
  SELECT array_agg(g.ms) AS lateness_ms, array_agg(g.n) AS lateness_n
    FROM (SELECT ((c.at_s - extract(epoch FROM w.due_at)::float8) * 1000)::int4 AS ms, count(*)::int AS n
            FROM written w, clock c GROUP BY w.due_at, c.at_s) g
)
SELECT count(*)::int AS n,
       count(*) FILTER (WHERE result = 'applied')::int AS done,
       count(*) FILTER (WHERE result = 'skipped')::int AS skipped,
       count(*) FILTER (WHERE state = 'failed')::int AS failed,
       count(*) FILTER (WHERE state = 'pending')::int AS retried,
       min(last_error) FILTER (WHERE state IN ('failed', 'pending')) AS error_sample,
       (SELECT l.lateness_ms FROM late l) AS lateness_ms,
       (SELECT l.lateness_n FROM late l) AS lateness_n,
       (SELECT c.at_s * 1000 FROM clock c) AS measured_ms
  FROM written
