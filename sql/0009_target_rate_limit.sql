-- 0009_target_rate_limit: a rate limit per business database, fleet-wide: at most rate_limit
-- timeouts per second applied against one database (shards.target, sql/0005), over all kinds
-- whose shards target it. It protects a struggling business database whatever the number of
-- kinds and workers that write to it; the per-kind limits (sql/0006) still hold beside it.
--
-- One row per business database of the config (businessDatabases.<name>), written by `migrate`
-- and every process start like timeout_center.kinds: config_rate_limit always, rate_limit only
-- while controls_source = 'config'. A run-time change (SQL, `timeout-center limit --database
-- <name> --rate N|none`, the console) sets controls_source = 'operator' and survives restarts
-- until `limit --database <name> --reset`. The leading coordinator reads the row every tick
-- (coordinator/queries/next_due.sql) and plan_shards.sql plans a target's shards only within
-- its budget, so a change applies within a tick without a restart. Same-database shards (target
-- NULL) have no row and no limit.
CREATE TABLE timeout_center.targets (
  target               text PRIMARY KEY,
  rate_limit           numeric CHECK (rate_limit > 0),
  controls_source      text NOT NULL DEFAULT 'config' CHECK (controls_source IN ('config', 'operator')),
  controls_changed_by  text,
  controls_changed_at  timestamptz,
  config_rate_limit    numeric CHECK (config_rate_limit > 0),
  updated_at           timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE timeout_center.targets IS 'business databases of the config (shards.target) and their fleet-wide rate limits';
COMMENT ON COLUMN timeout_center.targets.rate_limit IS 'at most this many timeouts per second against this database, over all kinds, fleet-wide; NULL: no limit';
COMMENT ON COLUMN timeout_center.targets.config_rate_limit IS 'the config file''s businessDatabases.<name>.rateLimit (written at every process start); reset copies it to rate_limit';

-- A change of the live limit is audited whatever its entry point (a plain SQL UPDATE too), like
-- kinds_controls_audit in 0006: the actor is the session's timeout_center.actor setting, else the
-- database user; audit_log.target names the database, audit_log.kind stays NULL.
CREATE FUNCTION timeout_center.targets_controls_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.rate_limit IS DISTINCT FROM OLD.rate_limit THEN
    NEW.controls_changed_by := timeout_center.current_actor();
    NEW.controls_changed_at := now();
    INSERT INTO timeout_center.audit_log (actor, action, kind, target, details)
    VALUES (NEW.controls_changed_by, 'limit', NULL, NEW.target,
            jsonb_build_object(
              'source', NEW.controls_source,
              'before', jsonb_build_object('rateLimit', OLD.rate_limit),
              'after', jsonb_build_object('rateLimit', NEW.rate_limit)));
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER targets_controls_audit
  BEFORE UPDATE OF rate_limit ON timeout_center.targets
  FOR EACH ROW EXECUTE FUNCTION timeout_center.targets_controls_audit();

-- One row per business database: its limit, who changed it last, the config's value, the kinds
-- whose handlers run there, and what of it is in flight now (running shards, queued shards, and
-- the timeouts they may claim: plan_shards keeps this under one second's worth of the limit).
CREATE VIEW timeout_center.target_controls AS
SELECT t.target, t.rate_limit, t.controls_source, t.controls_changed_by, t.controls_changed_at, t.config_rate_limit,
       coalesce((SELECT array_agg(r.kind ORDER BY r.kind) FROM timeout_center.kind_routes r WHERE t.target = ANY (r.databases)), '{}') AS kinds,
       (SELECT count(*) FROM timeout_center.shards sh WHERE sh.target = t.target AND sh.state = 'running')::int AS running_shards,
       (SELECT count(*) FROM timeout_center.shards sh WHERE sh.target = t.target AND sh.state = 'queued')::int AS queued_shards,
       (SELECT coalesce(sum(sh.claim_limit), 0) FROM timeout_center.shards sh WHERE sh.target = t.target AND sh.state IN ('queued', 'running'))::bigint AS in_flight_limit
  FROM timeout_center.targets t;
