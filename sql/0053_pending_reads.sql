-- 0053_pending_reads: the coordinator's reads of pending timeouts, planned by themselves (issue 45).
--
-- Every tick reads a kind's pending timeouts a few ways (next_due.sql: the floor's walk, the
-- ceilings of a flood's newest-first shards, the latest due, the next due after now, whether
-- anything is due; plan_shards.sql and count_ahead.sql: the due rows counted up to a bound;
-- backlog.sql: the lag monitor's count). Each has one good plan, whatever the estimate: walk
-- timeouts_due_by_key (or, per target, timeouts_due_by_target) in key order from the floor. Under
-- an old snapshot held for twenty minutes, autovacuum's pass over the table leaves statistics that
-- count a row or two while the indexes hold millions of entries the snapshot keeps, and the first
-- plan after it took timeouts_one_live_per_biz by the kind alone (a bitmap scan planned for one
-- row), reading all of them: 0.7-1.8 s, once a minute (docs/vacuum-horizon-figures.md, "One hour,
-- the claim planned by itself"). These functions hold the reads as 0052's claim_fresh_* hold the
-- claim's: the planner's other ways of answering (bitmap, sequential scans, sorts) off for that
-- query alone. A function with SET clauses is never inlined: its query is planned by itself. Each
-- is STABLE, so it reads with the calling statement's snapshot, as the inline read did (the claim
-- floors' reasoning, sql/0030, holds unchanged); those that return a row say so (ROWS 1), so the
-- statements around them are planned for one.
--
--   pending_first: the oldest pending key of a kind from (from_at, from_id) on, due by to_at.
--   pending_last: the newest pending key of a kind between (from_at, from_id) and (to_at, to_id).
--   pending_count: how many pending rows of a kind from (from_at, from_id) on are due by to_at,
--     counted up to p_limit; pending_count_for_target the same for one target of a routed kind
--     (from its floor's instant).
--   pending_backlog: the lag monitor's count of a kind's due rows from its floor, and the oldest
--     due time among them (every row: it is a gauge, not a plan).
--
-- Online: five new functions, a catalog change each. The previous release neither calls nor reads
-- them.

CREATE FUNCTION timeout_center.pending_first(p_kind timeout_center.kind, p_from_at timestamptz, p_from_id bigint, p_to_at timestamptz)
RETURNS TABLE (available_at timestamptz, id bigint)
LANGUAGE sql STABLE ROWS 1
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT t.available_at, t.id FROM timeout_center.timeouts t
   WHERE t.kind = p_kind AND t.state = 'pending' AND (t.available_at, t.id) >= (p_from_at, p_from_id) AND t.available_at <= p_to_at
   ORDER BY t.available_at, t.id
   LIMIT 1
$$;
COMMENT ON FUNCTION timeout_center.pending_first(timeout_center.kind, timestamptz, bigint, timestamptz) IS
  'the oldest pending key (available_at, id) of a kind from (from_at, from_id) on, due by to_at: timeouts_due_by_key in order, whatever the row estimate (sql/0053)';

CREATE FUNCTION timeout_center.pending_last(p_kind timeout_center.kind, p_from_at timestamptz, p_from_id bigint, p_to_at timestamptz, p_to_id bigint)
RETURNS TABLE (available_at timestamptz, id bigint)
LANGUAGE sql STABLE ROWS 1
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT t.available_at, t.id FROM timeout_center.timeouts t
   WHERE t.kind = p_kind AND t.state = 'pending' AND (t.available_at, t.id) >= (p_from_at, p_from_id) AND (t.available_at, t.id) <= (p_to_at, p_to_id)
   ORDER BY t.available_at DESC, t.id DESC
   LIMIT 1
$$;
COMMENT ON FUNCTION timeout_center.pending_last(timeout_center.kind, timestamptz, bigint, timestamptz, bigint) IS
  'the newest pending key (available_at, id) of a kind between (from_at, from_id) and (to_at, to_id): timeouts_due_by_key backward, whatever the row estimate (sql/0053)';

CREATE FUNCTION timeout_center.pending_count(p_kind timeout_center.kind, p_from_at timestamptz, p_from_id bigint, p_to_at timestamptz, p_limit bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT count(*) FROM (SELECT 1 FROM timeout_center.timeouts t
                         WHERE t.kind = p_kind AND t.state = 'pending' AND (t.available_at, t.id) >= (p_from_at, p_from_id) AND t.available_at <= p_to_at
                         ORDER BY t.available_at, t.id
                         LIMIT p_limit) d
$$;
COMMENT ON FUNCTION timeout_center.pending_count(timeout_center.kind, timestamptz, bigint, timestamptz, bigint) IS
  'pending rows of a kind from (from_at, from_id) on, due by to_at, counted up to p_limit: timeouts_due_by_key in order, whatever the row estimate (sql/0053)';

CREATE FUNCTION timeout_center.pending_count_for_target(p_kind timeout_center.kind, p_target text, p_from_at timestamptz, p_to_at timestamptz, p_limit bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT count(*) FROM (SELECT 1 FROM timeout_center.timeouts t
                         WHERE t.kind = p_kind AND t.target = p_target AND t.state = 'pending' AND t.available_at >= p_from_at AND t.available_at <= p_to_at
                         ORDER BY t.available_at
                         LIMIT p_limit) d
$$;
COMMENT ON FUNCTION timeout_center.pending_count_for_target(timeout_center.kind, text, timestamptz, timestamptz, bigint) IS
  'pending rows of a kind stamped for one target, due between from_at and to_at, counted up to p_limit: timeouts_due_by_target in order, whatever the row estimate (sql/0053)';

CREATE FUNCTION timeout_center.pending_backlog(p_kind timeout_center.kind, p_from_at timestamptz, p_from_id bigint, p_to_at timestamptz)
RETURNS TABLE (pending_due bigint, oldest_due_at timestamptz)
LANGUAGE sql STABLE ROWS 1
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
  -- ordered: a subquery with ORDER BY is planned apart, and only the due index gives its order
  SELECT count(*), min(d.due_at) FROM (SELECT t.due_at FROM timeout_center.timeouts t
                                         WHERE t.kind = p_kind AND t.state = 'pending' AND (t.available_at, t.id) >= (p_from_at, p_from_id) AND t.available_at <= p_to_at
                                         ORDER BY t.available_at, t.id) d
$$;
COMMENT ON FUNCTION timeout_center.pending_backlog(timeout_center.kind, timestamptz, bigint, timestamptz) IS
  'the due pending rows of a kind from (from_at, from_id) on, counted, and their oldest due_at: timeouts_due_by_key in order, whatever the row estimate (sql/0053)';
