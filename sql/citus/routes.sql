-- The routing rules on the Citus layout (issue 34, "the external path on Citus"). On one PostgreSQL
-- a rule written to kind_routes recompiles the timeouts' stamp trigger (sql/0020:
-- compile_stamp_target() runs CREATE OR REPLACE TRIGGER on timeout_center.timeouts) and re-stamps
-- the kind's rows with one UPDATE joined to kind_routes. Citus refuses both on the distributed
-- timeouts ("triggers are not supported on distributed tables": every `migrate` of a Citus center
-- with a kind whose handler runs in a business database failed there). On Citus no claim reads the
-- stamp: a kind with one business database claims by kind and bucket (its shards' target is the
-- database, from the map), and kinds routed over several business databases are not planned on
-- Citus (citus/coordinator/plan_shards.sql). So here a rule recompiles nothing and stamps nothing
-- (timeouts.target stays NULL, as the layout's trigger leaves it), and a rule over several
-- databases is refused with a message that says so, instead of being left unplanned in silence.
-- Applied by `timeout-center migrate` on a database with the Citus layout, after
-- sql/citus/layout.sql and at every migrate, before the kinds and their rules are written.
CREATE OR REPLACE FUNCTION timeout_center.compile_stamp_target() RETURNS void LANGUAGE plpgsql AS $compile$
DECLARE
  routed text;
BEGIN
  SELECT string_agg(format('%s (%s over %s)', r.kind, r.route_by, array_to_string(r.databases, ', ')), '; ' ORDER BY r.kind)
    INTO routed
    FROM timeout_center.kind_routes r
   WHERE r.route_by <> 'database';
  IF routed IS NOT NULL THEN
    RAISE EXCEPTION 'kinds routed over several business databases do not run on the Citus layout: %', routed
      USING HINT = 'give each such kind one business database (handler.database) on a Citus center; docs/scale.md "Citus: what runs"';
  END IF;
END $compile$;

CREATE OR REPLACE FUNCTION timeout_center.restamp_targets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM timeout_center.compile_stamp_target();
  RETURN NULL;
END $$;
