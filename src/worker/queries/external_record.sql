-- external_record: the center's record of an external shard run, after the handler's own commit
-- (or after the whole batch failed). Writes each timeout of the shard (the pending ones its claim
-- holds, shards.held_ids: their one write in the center, sql/0020; and on a re-run the ones it
-- took back as dispatched) and closes the shard with its counts, only while the lease is ours.
-- Done timeouts move to timeout_center.done_timeouts (sql/0010); the others stay in
-- timeout_center.timeouts. A held row's attempts were not counted by its claim: counted here.
--   Applied biz_ids: done, result applied. Failed biz_ids (row-level: reported by the handler,
--   or isolated by splitting): back to pending with a backoff, or failed once out of attempts
--   (at once when permanent). The others: done, result skipped (nothing to change).
--   A batch-level failure ($9 not NULL: the target was down, answered 5xx/401/429, timed out,
--   replied nonsense, or its breaker is open): every row goes back to pending, due again in $9
--   ms, and the attempt is not counted: such a failure never fails a timeout for good.
--   Rows the run did not handle ($11, the marker's `ran`, does not name them): back to pending,
--   due now, the attempt not counted; never recorded as skipped.
--   Every write re-checks that the row is still this shard's (dispatched, or held and pending): a
--   row another transaction changed since the statement's snapshot (under READ COMMITTED the
--   DELETE and UPDATE re-check only their own WHERE after waiting for its lock) is left as that
--   transaction left it.
--   $1 shard id   $2 lease token   $3 applied biz_ids (text[])   $4 failed biz_ids (text[])
--   $5 their errors (text[])   $6 their permanence (boolean[])   $7 max attempts
--   $8 backoff base (ms)   $9 batch retry delay (ms, NULL when the batch ran)   $10 batch error
--   $11 the biz_ids the run handled (text[]; NULL: every row the shard holds)
-- @params shardId: number, leaseToken: string, applied: string[], failedIds: string[], failedErrors: string[],
-- @params failedPermanent: boolean[], maxAttempts: number, backoffMs: number, batchRetryMs: number | null,
-- @params batchError: string | null, ran: string[] | null
-- Times: this statement runs after the target's COMMIT (the commit that applied the rows), so the
-- rows it moves get its start (statement_timestamp()) as finished_at; the shard's finished_at and
-- at_ms are clock_timestamp() at its end (the last statement of the fenced center transaction
-- before its COMMIT), the instant tc_lateness_seconds is taken at (external-executor.ts).
-- Returns the shard's counts and at_ms (epoch ms); no row when the lease is no longer ours. And
-- the lateness of the rows it wrote, one value per distinct due time (as claim.sql's batch form):
-- lateness_ms (int4[], measured at measured_ms, this statement's start; the worker moves it to
-- at_ms) and lateness_n (int4[], how many rows each stands for).
WITH ours AS MATERIALIZED (
  SELECT sh.id, sh.held_ids FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
     FOR UPDATE
), ids AS MATERIALIZED (
  -- The shard's rows, as ids: the pending ones its claim holds, and on a re-run the dispatched
  -- ones it took back (timeouts_in_flight: none on a first run). Each row's fate comes from the
  -- parameter arrays, looked up by biz_id (hashed: the arrays are constants of the plan), inside
  -- the write that reaches the row, so each row is read once, through the primary key: the
  -- writes find their rows by id in an array (a join of the table with a CTE of the rows was
  -- planned as a nested loop over two 1-row estimates: 0.2 s per 1,000-row shard), and a first
  -- pass that read the rows to sort them into moved and kept cost a second index lookup per row.
  SELECT coalesce(o.held_ids, '{}'::bigint[])
         || ARRAY(SELECT t.id FROM timeout_center.timeouts t WHERE t.shard_id = $1 AND t.state = 'dispatched') AS ids
    FROM ours o
), moved AS (
  -- Done (applied, or skipped: nothing to change): out of the hot table, into the history.
  DELETE FROM timeout_center.timeouts t
   WHERE t.id = ANY ((SELECT i.ids FROM ids i)::bigint[])
     AND ((t.shard_id = $1 AND t.state = 'dispatched') OR t.state = 'pending') AND $9::int IS NULL
     AND NOT t.biz_id = ANY ($4::text[]) AND ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[]))
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts + (t.state = 'pending')::int AS attempts, $1::bigint AS shard_id,
            t.last_error, t.created_at,
            CASE WHEN t.biz_id = ANY ($3::text[]) THEN 'applied' ELSE 'skipped' END AS result
), archived AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, statement_timestamp()
    FROM moved
  RETURNING 'done'::text AS state, result, NULL::text AS last_error, due_at
), kept AS (
  -- Failed, or the whole batch failed, or not handled by the run: stays, pending again or failed.
  -- A failed row's error and permanence are at its biz_id's position in $4. Only the ids the
  -- DELETE did not move are looked up again (none when the whole shard is done, the usual case).
  UPDATE timeout_center.timeouts t
     SET state = CASE WHEN $9::int IS NOT NULL OR NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) THEN 'pending'
                      WHEN coalesce(($6::boolean[])[array_position($4::text[], t.biz_id)], false) OR t.attempts + (t.state = 'pending')::int >= $7 THEN 'failed'
                      ELSE 'pending' END,
         result = NULL,
         -- a dispatched row's attempt was counted by its claim, a held row's is counted now
         attempts = CASE WHEN $9::int IS NOT NULL OR NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[]))
                         THEN CASE WHEN t.state = 'pending' THEN t.attempts ELSE greatest(t.attempts - 1, 0) END
                         ELSE t.attempts + (t.state = 'pending')::int END,
         shard_id = $1,
         last_error = CASE WHEN $9::int IS NOT NULL THEN $10
                           WHEN NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) THEN t.last_error
                           ELSE ($5::text[])[array_position($4::text[], t.biz_id)] END,
         available_at = CASE WHEN $9::int IS NOT NULL THEN statement_timestamp() + $9::int * interval '1 millisecond'
                             WHEN NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])) THEN statement_timestamp()
                             WHEN NOT (coalesce(($6::boolean[])[array_position($4::text[], t.biz_id)], false) OR t.attempts + (t.state = 'pending')::int >= $7)
                               THEN statement_timestamp() + least($8 * power(2, t.attempts + (t.state = 'pending')::int - 1), 600000) * interval '1 millisecond'
                             ELSE t.available_at END,
         finished_at = CASE WHEN $9::int IS NULL AND ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[]))
                             AND (coalesce(($6::boolean[])[array_position($4::text[], t.biz_id)], false) OR t.attempts + (t.state = 'pending')::int >= $7)
                            THEN statement_timestamp() END
   WHERE t.id = ANY (CASE WHEN (SELECT count(*) FROM moved) = cardinality((SELECT i.ids FROM ids i)) THEN '{}'::bigint[]
                          ELSE ARRAY(SELECT x FROM unnest((SELECT i.ids FROM ids i)) x EXCEPT ALL SELECT m.id FROM moved m) END)
     AND ((t.shard_id = $1 AND t.state = 'dispatched') OR t.state = 'pending')
     -- its fate is to stay (the DELETE's fate conditions, negated): a row the DELETE passed over
     -- for a concurrent change is left as that transaction left it, never retried here
     AND ($9::int IS NOT NULL OR t.biz_id = ANY ($4::text[]) OR NOT ($11::text[] IS NULL OR t.biz_id = ANY ($11::text[])))
  RETURNING t.state, t.result, t.last_error, t.due_at
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
), late AS (
  SELECT coalesce(array_agg(g.ms), '{}') AS lateness_ms, coalesce(array_agg(g.n), '{}') AS lateness_n
    FROM (SELECT (date_part('epoch', statement_timestamp() - w.due_at) * 1000)::int4 AS ms, count(*)::int AS n
            FROM written w GROUP BY w.due_at) g
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL, size = c.n, held_ids = NULL,
       done_count = c.done, skipped_count = c.skipped, failed_count = c.failed, retried_count = c.retried,
       error_sample = c.error_sample
  FROM counts c, ours o, late l
 WHERE sh.id = o.id
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried,
          date_part('epoch', clock_timestamp()) * 1000 AS at_ms,
          l.lateness_ms, l.lateness_n, date_part('epoch', statement_timestamp()) * 1000 AS measured_ms
