-- claim: second statement of the shard transaction, and the one write of each timeout on its way
-- to done. Takes the shard's rows and marks them done (applied); finish.sql then corrects only
-- the exceptions (skipped, failed).
--   - A first run claims up to the shard's limit of due pending timeouts of its kind, in due
--     order. SKIP LOCKED lets shards of the same kind run side by side on disjoint rows and passes
--     over a row a payer is cancelling right now; the row locks taken here hold until commit, so
--     a cancel arriving later waits and then finds nothing live. If the worker dies before commit
--     the rows are simply pending again.
--   - A re-run after a worker died applies the rows pin.sql fixed for it (state dispatched); it
--     then claims nothing new (the one-time NOT EXISTS below).
-- Two forms. Plain ($4 false): every row is marked applied and the rows come back as arrays (one
-- row in all) for the worker to hand to its handler; finish.sql then marks the skipped ones. Batch
-- ($4 true): a SQL handler takes the place of the `applied` CTE below (worker/sql-handler.ts, its
-- $1 being the claimed business ids) and runs before the rows are written, so each row is written
-- once with its final result, and only the counts and the lateness come back.
-- The rows are locked first (pinned, fresh) and written last (taken); ARRAY(...) makes that UPDATE
-- probe the primary key for exactly those ids (with IN (...) the planner may hash-join them
-- against a scan of the whole table).
--   $1 shard id   $2 kind   $3 claim limit   $4 batch form (boolean)
-- Returns n, skipped (how many the handler did not change; batch form), lateness in s (float8[]),
-- and in the plain form ids (bigint[]), biz_ids (text[]), payloads (jsonb[]).
WITH pinned AS MATERIALIZED (
  SELECT p.id, p.biz_id FROM timeout_center.timeouts p
   WHERE p.shard_id = $1 AND p.state = 'dispatched'
     FOR UPDATE
), fresh AS MATERIALIZED (
  SELECT d.id, d.biz_id FROM timeout_center.timeouts d
   WHERE d.kind = $2 AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     AND NOT EXISTS (SELECT 1 FROM timeout_center.timeouts p WHERE p.shard_id = $1 AND p.state = 'dispatched')
   ORDER BY d.available_at
   LIMIT $3
     FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
  SELECT id, biz_id FROM pinned UNION ALL SELECT id, biz_id FROM fresh
), applied (v) AS (
  SELECT NULL::text WHERE false -- tc:handler (the batch form puts the SQL handler here)
), taken AS (
  UPDATE timeout_center.timeouts t
     SET state = 'done', attempts = t.attempts + 1, finished_at = statement_timestamp(), shard_id = $1,
         result = CASE WHEN NOT $4 OR t.biz_id IN (SELECT a.v::text FROM applied a WHERE a.v IS NOT NULL)
                       THEN 'applied' ELSE 'skipped' END
   WHERE t.id = ANY (ARRAY(SELECT id FROM due))
  RETURNING t.id, t.biz_id, t.payload, t.due_at, t.result
)
SELECT count(*)::int AS n,
       count(*) FILTER (WHERE result = 'skipped')::int AS skipped,
       CASE WHEN NOT $4 THEN coalesce(array_agg(id ORDER BY id), '{}') END AS ids,
       CASE WHEN NOT $4 THEN coalesce(array_agg(biz_id ORDER BY id), '{}') END AS biz_ids,
       CASE WHEN NOT $4 THEN coalesce(array_agg(payload ORDER BY id), '{}') END AS payloads,
       coalesce(array_agg(extract(epoch FROM statement_timestamp() - due_at)::float8 ORDER BY id), '{}') AS lateness
  FROM taken
