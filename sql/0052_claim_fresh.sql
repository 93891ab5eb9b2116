-- 0052_claim_fresh: a shard's read of fresh due rows, planned on its own (issue 45).
--
-- The claim (src/worker/queries/claim.sql) takes up to its limit of a kind's due rows in key
-- order. Planned inline, its plan followed the row estimate: when the statistics expected fewer
-- due rows than the limit (a flood written after the last ANALYZE; under an old snapshot held
-- elsewhere autovacuum's pass over the swollen table comes late, and the heap's pages hold far
-- fewer live rows than the estimate assumes), the planner read every due row of the flood (bitmap
-- or sequential scan) and sorted them, on disk, for its limit: each shard of a 200,000 flood read
-- the rest of it (docs/vacuum-horizon.md). The read has one good plan whatever the estimate: walk
-- timeouts_due_by_key in order and stop at the limit. These functions hold the read, with the
-- planner's other ways of answering it off for that query alone: in the batch form a kind's SQL
-- handler runs in the same statement (worker/sql-handler.ts), and keeps its own planner settings.
-- A function with SET clauses is never inlined: its query is planned by itself, on each call.
--
--   claim_fresh_oldest: from the shard's claim floor (sql/0030, 0041), oldest due first.
--   claim_fresh_newest: every other shard of a flood mapped ahead (take_lease.sql from_newest):
--     from the shard's ceiling (or the flood's instant, not_before) down, newest first.
-- Both take nothing while the shard has rows pinned to it (a re-run applies those: pin.sql).
--
-- Online: two new functions, a catalog change each. The previous release neither calls nor
-- reads them.

CREATE FUNCTION timeout_center.claim_fresh_oldest(p_shard_id bigint, p_kind timeout_center.kind, p_limit bigint)
RETURNS TABLE (id bigint, biz_id text, payload jsonb, due_at timestamptz, trace_parent text)
LANGUAGE sql VOLATILE
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT d.id, d.biz_id, d.payload, d.due_at, d.trace_parent FROM timeout_center.timeouts d
   WHERE d.kind = p_kind AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     AND (d.available_at, d.id) >= (coalesce((SELECT s.claim_floor FROM timeout_center.shards s WHERE s.id = p_shard_id), '-infinity'),
                                    coalesce((SELECT s.claim_floor_id FROM timeout_center.shards s WHERE s.id = p_shard_id), 0))
     AND NOT EXISTS (SELECT 1 FROM timeout_center.timeouts p WHERE p.shard_id = p_shard_id AND p.state = 'dispatched')
   ORDER BY d.available_at, d.id
   LIMIT p_limit
     FOR UPDATE SKIP LOCKED
$$;
COMMENT ON FUNCTION timeout_center.claim_fresh_oldest(bigint, timeout_center.kind, bigint) IS
  'a shard''s fresh due rows of its kind, oldest first from its claim floor, locked (SKIP LOCKED): the due index in order, whatever the row estimate (sql/0052)';

CREATE FUNCTION timeout_center.claim_fresh_newest(p_shard_id bigint, p_kind timeout_center.kind, p_limit bigint)
RETURNS TABLE (id bigint, biz_id text, payload jsonb, due_at timestamptz, trace_parent text)
LANGUAGE sql VOLATILE
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT d.id, d.biz_id, d.payload, d.due_at, d.trace_parent FROM timeout_center.timeouts d
   WHERE d.kind = p_kind AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     AND (d.available_at, d.id) >= (coalesce((SELECT s.claim_floor FROM timeout_center.shards s WHERE s.id = p_shard_id), '-infinity'),
                                    coalesce((SELECT s.claim_floor_id FROM timeout_center.shards s WHERE s.id = p_shard_id), 0))
     AND (d.available_at, d.id) <= ((SELECT coalesce(s.claim_ceiling, s.not_before) FROM timeout_center.shards s WHERE s.id = p_shard_id),
                                    (SELECT coalesce(s.claim_ceiling_id, 9223372036854775807) FROM timeout_center.shards s WHERE s.id = p_shard_id))
     AND NOT EXISTS (SELECT 1 FROM timeout_center.timeouts p WHERE p.shard_id = p_shard_id AND p.state = 'dispatched')
   ORDER BY d.available_at DESC, d.id DESC
   LIMIT p_limit
     FOR UPDATE SKIP LOCKED
$$;
COMMENT ON FUNCTION timeout_center.claim_fresh_newest(bigint, timeout_center.kind, bigint) IS
  'a flood shard''s fresh due rows, newest first from its ceiling (or not_before), locked (SKIP LOCKED): the due index backward, whatever the row estimate (sql/0052)';
