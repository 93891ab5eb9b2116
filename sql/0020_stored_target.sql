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
-- row stays with the shard that holds it, whose target is its own. The cost: one lookup of the
-- kind's rule per row inserted (measured in docs/benchmarks.md).
ALTER TABLE timeout_center.timeouts ADD COLUMN target text;
COMMENT ON COLUMN timeout_center.timeouts.target IS
  'the business database this timeout''s order lives in, by its kind''s routing rule (kind_routes), written by the timeouts_stamp_target trigger; NULL for a kind without a rule';

UPDATE timeout_center.timeouts t
   SET target = timeout_center.route_target(r.route_by, r.databases, r.range_from, r.range_to, t.biz_id)
  FROM timeout_center.kind_routes r
 WHERE r.kind = t.kind::text;

CREATE FUNCTION timeout_center.stamp_target() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.target := (SELECT timeout_center.route_target(r.route_by, r.databases, r.range_from, r.range_to, NEW.biz_id)
                   FROM timeout_center.kind_routes r WHERE r.kind = NEW.kind::text);
  RETURN NEW;
END $$;

CREATE TRIGGER timeouts_stamp_target
  BEFORE INSERT OR UPDATE OF kind, biz_id ON timeout_center.timeouts
  FOR EACH ROW EXECUTE FUNCTION timeout_center.stamp_target();

CREATE FUNCTION timeout_center.restamp_targets() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  k text := CASE WHEN TG_OP = 'DELETE' THEN OLD.kind ELSE NEW.kind END;
BEGIN
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
