-- 0016_routes_to: the routed claim of the external path walks the due index (worker/external_claim.sql).
-- Its filter "this row's business database is the shard's target" was route_target(...) = target,
-- a comparison the planner gives PostgreSQL's default equality selectivity (0.5 %): it expected
-- a few hundred matching rows in the whole backlog, and rather than walk timeout_center.timeouts
-- in due order until the claim limit it read every due row of the kind, evaluated the rule on each
-- and sorted them: 0.27 s per claim over 50,000 due rows, growing with the backlog (bench:stores's
-- external path over three databases at 0.03x one database). The same test as a boolean function
-- that the planner cannot see into gets its default of one row in three, close to the truth for a
-- rule over a few databases, and the claim walks the index and stops at its limit (0.03 s).
-- PL/pgSQL so that it is not inlined back into the comparison.
CREATE FUNCTION timeout_center.routes_to(p_by text, p_databases text[], p_from bigint[], p_to bigint[], p_biz_id text, p_target text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN timeout_center.route_target(p_by, p_databases, p_from, p_to, p_biz_id) IS NOT DISTINCT FROM p_target;
END $$;
