-- The routing rules on the Citus layout (issue 34, "the external path on Citus"). On one PostgreSQL
-- a rule written to kind_routes recompiles the timeouts' stamp trigger (sql/0020:
-- compile_stamp_target() runs CREATE OR REPLACE FUNCTION/TRIGGER on timeout_center.timeouts) and
-- re-stamps the kind's rows with one UPDATE joined to kind_routes. Citus refuses both on the
-- distributed timeouts: the trigger without citus.enable_unsafe_triggers ("triggers are not
-- supported on distributed tables": every `migrate` of a Citus center with a kind whose handler runs
-- in a business database failed there), the UPDATE as a join of a coordinator table to a
-- distributed one. Here the re-stamp turns citus.enable_unsafe_triggers on (and sequential
-- multi-shard modifications) for its transaction, as sql/citus/layout.sql does, then calls
-- sql/0020's compile_stamp_target() unchanged (Citus propagates the function and the trigger to
-- every node, where the trigger runs on each shard), and reads the rule first and writes the
-- kind's rows with it as constants (a multi-shard UPDATE).
-- Applied by `timeout-center migrate` on a database with the Citus layout, after
-- sql/citus/layout.sql and at every migrate, before the kinds and their rules are written.
-- Keep in step with sql/0020_stored_target.sql's restamp_targets().
CREATE OR REPLACE FUNCTION timeout_center.restamp_targets() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k text := CASE WHEN TG_OP = 'DELETE' THEN OLD.kind ELSE NEW.kind END;
  v_by text;
  v_databases text[];
  v_from bigint[];
  v_to bigint[];
BEGIN
  -- transaction-local: they hold for the compile's DDL and for the UPDATE below
  PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
  PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
  PERFORM timeout_center.compile_stamp_target();
  SELECT r.route_by, r.databases, r.range_from, r.range_to INTO v_by, v_databases, v_from, v_to
    FROM timeout_center.kind_routes r WHERE r.kind = k;
  UPDATE timeout_center.timeouts t
     SET target = timeout_center.route_target(v_by, v_databases, v_from, v_to, t.biz_id)
   WHERE t.kind = k::timeout_center.kind AND t.state IN ('pending', 'failed')
     AND t.target IS DISTINCT FROM timeout_center.route_target(v_by, v_databases, v_from, v_to, t.biz_id);
  RETURN NULL;
END $$;
