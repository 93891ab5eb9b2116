-- 0020_stored_target: each timeout of a kind routed over business databases knows its target, so
-- that a claim for one target never reads another target's rows (issue 32; docs/benchmarks.md
-- "The external path, profiled").
--
-- Until now the routed claim (worker/external_claim.sql) walked the kind's due rows in due order
-- and evaluated the routing rule on each (routes_to, sql/0016), keeping one row in three with
-- three business databases and one in sixteen with sixteen, while every other target's claims
-- walked the same rows; and the map (plan_shards.sql) evaluated the rule on two windows of due
-- rows per plan to count them per target. Now the rule is evaluated once per timeout, when the
-- row is written: timeouts.target holds route_target(rule, biz_id) for a kind with a rule in
-- kind_routes (NULL for any other kind), and timeouts_due_by_target walks one target's due rows
-- in due order, for the claim and for the map's count.
--
-- Written by the trigger below on INSERT and on any UPDATE of kind or biz_id, whoever writes
-- (schedule(), the README's INSERT from any language, the HTTP API): a writer never names the
-- target. A rule that changes (kind_routes written by syncRoutes at migrate or start) re-stamps
-- the kind's timeouts that are not in flight (pending and failed) with the new rule; a dispatched
-- row stays with the shard that holds it, whose target is its own. The cost: nothing for a kind
-- without a rule; the rule's expression per row inserted for a kind with one (docs/benchmarks.md).
ALTER TABLE timeout_center.timeouts ADD COLUMN target text;
COMMENT ON COLUMN timeout_center.timeouts.target IS
  'the business database this timeout''s order lives in, by its kind''s routing rule (kind_routes), written by the timeouts_stamp_target trigger; NULL for a kind without a rule';

UPDATE timeout_center.timeouts t
   SET target = timeout_center.route_target(r.route_by, r.databases, r.range_from, r.range_to, t.biz_id)
  FROM timeout_center.kind_routes r
 WHERE r.kind = t.kind::text;

-- The stamp costs nothing for a kind without a rule: the trigger's WHEN names the routed kinds,
-- and its function has each rule inlined as an expression (no query per row). Both are compiled
-- from kind_routes by compile_stamp_target() whenever a rule changes (the trigger below on
-- kind_routes). A plain trigger that looked the rule up per row tripled the cost of an INSERT of
-- any kind (100,000 rows: 89 -> 280 µs per row on a loaded box; compiled: 50 -> 56 µs for a kind
-- without a rule, 50 -> 75-135 µs for a routed one, same box, same run).
CREATE FUNCTION timeout_center.stamp_target() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.target := NULL;
  RETURN NEW;
END $$;

CREATE TRIGGER timeouts_stamp_target
  BEFORE INSERT OR UPDATE OF kind, biz_id ON timeout_center.timeouts
  FOR EACH ROW WHEN (NEW.target IS NOT NULL)
  EXECUTE FUNCTION timeout_center.stamp_target();

CREATE FUNCTION timeout_center.compile_stamp_target() RETURNS void LANGUAGE plpgsql AS $compile$
DECLARE
  cases text;
  kinds text[];
BEGIN
  SELECT string_agg(format('WHEN %L THEN timeout_center.route_target(%L, %L::text[], %L::bigint[], %L::bigint[], NEW.biz_id)',
                           r.kind, r.route_by, r.databases, r.range_from, r.range_to), ' ' ORDER BY r.kind),
         array_agg(r.kind ORDER BY r.kind)
    INTO cases, kinds
    FROM timeout_center.kind_routes r;
  EXECUTE format($f$CREATE OR REPLACE FUNCTION timeout_center.stamp_target() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  NEW.target := %s;
  RETURN NEW;
END $body$$f$, CASE WHEN cases IS NULL THEN 'NULL' ELSE 'CASE NEW.kind::text ' || cases || ' END' END);
  -- A writer's own target is never kept: a row naming one fires the trigger too.
  EXECUTE format('CREATE OR REPLACE TRIGGER timeouts_stamp_target BEFORE INSERT OR UPDATE OF kind, biz_id ON timeout_center.timeouts '
                 'FOR EACH ROW WHEN (%s) EXECUTE FUNCTION timeout_center.stamp_target()',
                 CASE WHEN kinds IS NULL THEN 'NEW.target IS NOT NULL'
                      ELSE format('NEW.kind::text = ANY (%L::text[]) OR NEW.target IS NOT NULL', kinds) END);
END $compile$;

SELECT timeout_center.compile_stamp_target();

CREATE FUNCTION timeout_center.restamp_targets() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  k text := CASE WHEN TG_OP = 'DELETE' THEN OLD.kind ELSE NEW.kind END;
BEGIN
  PERFORM timeout_center.compile_stamp_target();
  UPDATE timeout_center.timeouts t
     SET target = x.target
    FROM (SELECT t2.id, (SELECT timeout_center.route_target(r.route_by, r.databases, r.range_from, r.range_to, t2.biz_id)
                           FROM timeout_center.kind_routes r WHERE r.kind = k) AS target
            FROM timeout_center.timeouts t2
           WHERE t2.kind::text = k AND t2.state IN ('pending', 'failed')) x
   WHERE t.id = x.id AND t.target IS DISTINCT FROM x.target;
  RETURN NULL;
END $$;

CREATE TRIGGER kind_routes_restamp_targets
  AFTER INSERT OR UPDATE OR DELETE ON timeout_center.kind_routes
  FOR EACH ROW EXECUTE FUNCTION timeout_center.restamp_targets();

-- One target's due rows in due order: the routed claim and the map's count per target.
CREATE INDEX timeouts_due_by_target ON timeout_center.timeouts (kind, target, available_at)
  WHERE state = 'pending' AND target IS NOT NULL;

-- The external path writes each timeout once in the center (issue 32). Its claim used to mark
-- every row dispatched, with the shard, and commit, before the handler ran in the business
-- database; the record then moved each row again. Now the claim writes only the shard's row:
-- shards.held_ids, the ids of the timeouts it took, which stay pending, unwritten, until the
-- record moves them (worker/queries/external_claim.sql, external_record.sql). While a shard
-- queued or running holds an id:
--   - no other claim takes it (external_claim.sql reads the ids the kind's live shards hold);
--   - a cancel or a reschedule of it changes nothing (UPDATE 0, cancel() returns false), as for a
--     dispatched row (0012's rule): its shard may be closing the order right now, in another
--     database; the payment's guarded UPDATE decides. Enforced by the trigger below, so the
--     README's plain SQL cancel and the HTTP API get the same answer;
--   - a re-run of the shard (its worker died, the lease ran out) takes them back as dispatched
--     rows (the old second write, on a re-run only) and goes on as before: the marker in the
--     business database says what the earlier run did;
--   - a shard abandoned after its max attempts fails them (coordinator/queries/abandon_shards.sql).
-- held_ids is NULL once the shard recorded, or took its rows back as dispatched.
ALTER TABLE timeout_center.shards ADD COLUMN held_ids bigint[];
COMMENT ON COLUMN timeout_center.shards.held_ids IS
  'external path: the pending timeouts this shard''s run took (no other claim takes them, a cancel of them is refused) until its record; NULL otherwise';

-- Out of line and uncompressed: a claim writes a few kilobytes of ids once, compressing them
-- would cost the claim more than it saves.
ALTER TABLE timeout_center.shards ALTER COLUMN held_ids SET STORAGE EXTERNAL;

CREATE INDEX shards_holding ON timeout_center.shards (kind) WHERE held_ids IS NOT NULL AND state IN ('queued', 'running');

CREATE FUNCTION timeout_center.refuse_held_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- A fresh snapshot (READ COMMITTED): a claim that committed while this statement waited for the
  -- row's lock is seen.
  IF EXISTS (SELECT 1 FROM timeout_center.shards sh
              WHERE sh.kind = OLD.kind::text AND sh.held_ids IS NOT NULL AND sh.state IN ('queued', 'running')
                AND OLD.id = ANY (sh.held_ids)) THEN
    RETURN NULL; -- too late: the shard holding this timeout may be applying it (UPDATE 0)
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER timeouts_refuse_held_change
  BEFORE UPDATE OF state, due_at ON timeout_center.timeouts
  FOR EACH ROW WHEN (OLD.state = 'pending' AND (NEW.state = 'cancelled' OR NEW.due_at IS DISTINCT FROM OLD.due_at))
  EXECUTE FUNCTION timeout_center.refuse_held_change();
