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
-- ARRAY(...) makes the UPDATE probe the primary key for exactly the claimed ids; with IN (...)
-- the planner may instead hash-join them against a scan of the whole table.
-- Two forms. Plain ($4 false): the rows come back as arrays (one row in all) for the worker to
-- hand to its handler. Batch ($4 true): a SQL handler takes the place of the `applied` CTE below
-- (worker/sql-handler.ts, its $1 being the claimed business ids), so claim and handler are one
-- statement, and only the count, the lateness and the skipped timeout ids come back.
--   $1 shard id   $2 kind   $3 claim limit   $4 batch form (boolean)
-- Returns n, and ids (bigint[]), biz_ids (text[]), payloads (jsonb[]) in the plain form or
-- skipped (bigint[]: ids whose object the handler did not return) in the batch form, and
-- lateness in s (float8[]).
WITH pinned AS (
  UPDATE timeout_center.timeouts t
     SET state = 'done', result = 'applied', attempts = t.attempts + 1, finished_at = statement_timestamp()
   WHERE t.shard_id = $1 AND t.state = 'dispatched'
  RETURNING t.id, t.biz_id, t.payload, t.due_at
), claimed AS (
  UPDATE timeout_center.timeouts t
     SET state = 'done', result = 'applied', attempts = t.attempts + 1, finished_at = statement_timestamp(),
         shard_id = $1
   WHERE t.id = ANY (ARRAY(SELECT d.id FROM timeout_center.timeouts d
                   WHERE d.kind = $2 AND d.state = 'pending' AND d.available_at <= statement_timestamp()
                   ORDER BY d.available_at
                   LIMIT $3
                     FOR UPDATE SKIP LOCKED))
     AND t.state = 'pending'
     AND NOT EXISTS (SELECT 1 FROM timeout_center.timeouts p WHERE p.shard_id = $1 AND p.state = 'dispatched')
  RETURNING t.id, t.biz_id, t.payload, t.due_at
), taken AS (
  SELECT * FROM pinned UNION ALL SELECT * FROM claimed
), applied (v) AS (
  SELECT NULL::text WHERE false -- tc:handler (the batch form puts the SQL handler here)
)
SELECT count(*)::int AS n,
       CASE WHEN NOT $4 THEN coalesce(array_agg(id ORDER BY id), '{}') END AS ids,
       CASE WHEN NOT $4 THEN coalesce(array_agg(biz_id ORDER BY id), '{}') END AS biz_ids,
       CASE WHEN NOT $4 THEN coalesce(array_agg(payload ORDER BY id), '{}') END AS payloads,
       CASE WHEN $4 THEN coalesce(array_agg(id) FILTER (WHERE biz_id NOT IN (SELECT a.v::text FROM applied a WHERE a.v IS NOT NULL)), '{}') END AS skipped,
       coalesce(array_agg(extract(epoch FROM statement_timestamp() - due_at)::float8 ORDER BY id), '{}') AS lateness
  FROM taken
