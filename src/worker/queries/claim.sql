-- claim: second statement of the shard transaction. Takes the shard's rows; in the batch form it
-- is also the one write of each timeout on its way to done: the row leaves timeout_center.timeouts
-- and enters timeout_center.done_timeouts with its result (sql/0010_done_timeouts.sql).
--   - A first run claims up to the shard's limit of due pending timeouts of its kind, in due
--     order. SKIP LOCKED lets shards of the same kind run side by side on disjoint rows and passes
--     over a row a payer is cancelling right now; the row locks taken here hold until commit, so
--     a cancel arriving later waits and then finds nothing live. If the worker dies before commit
--     the rows are simply pending again.
--   - A re-run after a worker died applies the rows pin.sql fixed for it (state dispatched); it
--     then claims nothing new (the one-time NOT EXISTS below).
-- Two forms. Plain ($4 false): the rows are only locked, and come back as arrays (one row in all)
-- for the worker to hand to its handler; finish.sql then writes each once with its outcome
-- (applied, skipped, failed). Batch ($4 true): a SQL handler takes the place of the `applied` CTE
-- below (worker/sql-handler.ts, its $1 being the claimed business ids) and runs before the rows
-- are written, so each row is moved once with its final result, and only the counts and the
-- lateness come back.
-- Two shards of a flood mapped ahead run side by side from opposite ends of the due index: the
-- batch form has a newest-first variant (sql-handler.ts), used by every other shard of such a
-- flood (take_lease.sql's from_newest), which claims the latest rows due by the flood's instant
-- (shards.not_before) first. Claiming from the same end, each claim passes over the rows the
-- other holds locked (SKIP LOCKED): 6-10 % of the drain (bench/analysis.md, seventh pass).
-- Rows due after the instant are left to oldest-first claims, so due order holds outside the
-- flood.
-- The fresh rows are read by a function (sql/0052: claim_fresh_oldest, claim_fresh_newest) so that
-- the read is planned by itself: the due index walked in order to the limit, never a read and
-- sort of a whole flood that the statistics had not yet seen; a batch handler in this statement
-- keeps the planner's usual settings.
-- The rows are locked first (pinned, fresh) and moved last (taken, moved); ARRAY(...) makes that
-- DELETE probe the primary key for exactly those ids (with IN (...) the planner may hash-join them
-- against a scan of the whole table). A DELETE adds no index entry to the hot table; the history
-- row gets one, in done_timeouts' primary key.
--   $1 shard id   $2 kind   $3 claim limit   $4 batch form (boolean)
-- @params shardId: number, kind: string, claimLimit: number, batch: boolean
-- @slot claimOrder tc:claim-order
-- @slot handler tc:handler
-- Returns n, skipped (how many the handler did not change; batch form), lateness_ms (int4[]) and
-- lateness_n (int4[]): in the batch form one lateness per distinct due time and how many rows had
-- it (a flood's rows share a few due times: a shard sends a few pairs, not one number per row,
-- and its worker parses a few); in the plain form one lateness per row, lateness_n NULL, and ids
-- (bigint[]), biz_ids (text[]), payloads (jsonb[]), all in id order. Both forms: trace_parents
-- (text[], NULL when none): up to 32 distinct schedule trace contexts of the claimed rows (sql/0022: one
-- request that scheduled a thousand timeouts is one link, not 32 copies of it), which
-- the shard's span links to. Each lateness is measured
-- at this statement's start; measured_ms is that instant (epoch ms, float8): the worker moves the
-- lateness to the PostgreSQL clock read right after the shard's COMMIT (executor.ts), so
-- tc_lateness_seconds counts the handler, the rest of the transaction and the commit.
-- A done row's finished_at is clock_timestamp() read once as this statement moves its rows (the
-- sub-SELECT: one value for the shard's rows): after the handler ran, before the shard's commit;
-- the shard's finished_at (finish.sql) is the later stamp, taken by the last statement before
-- COMMIT.
WITH pinned AS MATERIALIZED (
  SELECT p.id, p.biz_id, p.payload, p.due_at, p.trace_parent FROM timeout_center.timeouts p
   WHERE p.shard_id = $1 AND p.state = 'dispatched'
     FOR UPDATE
), fresh AS MATERIALIZED (
  -- the due index in key order from the shard's claim floor, whatever the row estimate (sql/0052)
  SELECT f.id, f.biz_id, f.payload, f.due_at, f.trace_parent FROM timeout_center.claim_fresh_oldest($1, $2, $3) f -- tc:claim-order (sql-handler.ts: the newest-first form of a flood's shard)
), due AS MATERIALIZED (
  SELECT id, biz_id, payload, due_at, trace_parent FROM pinned UNION ALL SELECT id, biz_id, payload, due_at, trace_parent FROM fresh
), applied (v) AS (
  SELECT NULL::text WHERE false -- tc:handler (the batch form puts the SQL handler here)
), taken AS (
  DELETE FROM timeout_center.timeouts t
   WHERE $4 AND t.id = ANY (ARRAY(SELECT id FROM due))
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at,
            CASE WHEN t.biz_id IN (SELECT a.v::text FROM applied a WHERE a.v IS NOT NULL)
                 THEN 'applied' ELSE 'skipped' END AS result
), moved AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts + 1, $1, result, last_error, created_at, (SELECT clock_timestamp())
    FROM taken
)
-- Batch form: counted per distinct due time of the rows moved, then summed. HAVING: one row in
-- this form, none in the other.
SELECT coalesce(sum(g.n), 0)::int AS n,
       coalesce(sum(g.skipped), 0)::int AS skipped,
       NULL::bigint[] AS ids, NULL::text[] AS biz_ids, NULL::jsonb[] AS payloads,
       coalesce(array_agg((date_part('epoch', statement_timestamp() - g.due_at) * 1000)::int4), '{}') AS lateness_ms,
       coalesce(array_agg(g.n), '{}') AS lateness_n,
       date_part('epoch', statement_timestamp()) * 1000 AS measured_ms,
       (SELECT array_agg(l.trace_parent) FROM (SELECT DISTINCT trace_parent FROM due WHERE trace_parent IS NOT NULL LIMIT 32) l) AS trace_parents
  FROM (SELECT due_at, count(*)::int AS n, count(*) FILTER (WHERE result = 'skipped')::int AS skipped
          FROM taken WHERE $4 GROUP BY due_at) g
HAVING $4
UNION ALL
-- Plain form: the rows locked, in id order; their arrays are aggregated in the same pass, so they
-- line up. Lateness in whole milliseconds (int4: cheap to print and parse).
SELECT count(*)::int, 0,
       coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.biz_id), '{}'), coalesce(array_agg(d.payload), '{}'),
       coalesce(array_agg((date_part('epoch', statement_timestamp() - d.due_at) * 1000)::int4), '{}'),
       NULL, date_part('epoch', statement_timestamp()) * 1000,
       (SELECT array_agg(l.trace_parent) FROM (SELECT DISTINCT trace_parent FROM due WHERE trace_parent IS NOT NULL LIMIT 32) l)
  FROM (SELECT id, biz_id, payload, due_at FROM due WHERE NOT $4 ORDER BY id) d
HAVING NOT $4
