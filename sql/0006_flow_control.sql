-- 0006_flow_control: per-kind flow control, enforced fleet-wide, and an audit trail of operator
-- actions.
--
-- A kind can be paused (nothing of it starts: the map plans no shard for it and a worker does not
-- take a queued shard of it; running shards finish), capped (at most max_running_shards of its
-- shards queued or running at once, fleet-wide) and rate-limited (at most rate_limit timeouts per
-- second, fleet-wide). The coordinator and the workers read these columns every tick / shard, so a
-- change takes effect without a restart.
--
-- The config file gives the defaults (written by `migrate` and every process start while
-- controls_source = 'config'); a change made at run time (SQL, CLI, console) sets
-- controls_source = 'operator' and is kept across restarts until reset to the config.
ALTER TABLE timeout_center.kinds
  ADD COLUMN paused              boolean NOT NULL DEFAULT false,
  ADD COLUMN max_running_shards  integer CHECK (max_running_shards > 0),
  ADD COLUMN rate_limit          numeric CHECK (rate_limit > 0),
  ADD COLUMN controls_source     text NOT NULL DEFAULT 'config' CHECK (controls_source IN ('config', 'operator')),
  ADD COLUMN controls_changed_by text,
  ADD COLUMN controls_changed_at timestamptz;

COMMENT ON COLUMN timeout_center.kinds.paused IS 'true: no shard of this kind starts; its due timeouts wait in the table';
COMMENT ON COLUMN timeout_center.kinds.max_running_shards IS 'at most this many shards of the kind queued or running at once, fleet-wide; NULL: no cap';
COMMENT ON COLUMN timeout_center.kinds.rate_limit IS 'at most this many timeouts per second, fleet-wide; NULL: no limit';

-- Who did what, when: every operator action (pause, resume, limit, retry, cancel, reschedule,
-- rerun_shard, ...) whatever its entry point. Changes of a kind's controls are recorded by the
-- trigger below, so a plain SQL UPDATE is audited too; the actor is the session's
-- timeout_center.actor setting (SET LOCAL timeout_center.actor = 'alice') or else the database user.
CREATE TABLE timeout_center.audit_log (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at       timestamptz NOT NULL DEFAULT now(),
  actor    text NOT NULL,
  action   text NOT NULL,
  kind     text,
  target   text,
  details  jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_at ON timeout_center.audit_log (at);

CREATE FUNCTION timeout_center.current_actor() RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT coalesce(nullif(current_setting('timeout_center.actor', true), ''), session_user::text)
$$;

CREATE FUNCTION timeout_center.kinds_controls_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.paused, NEW.max_running_shards, NEW.rate_limit)
     IS DISTINCT FROM (OLD.paused, OLD.max_running_shards, OLD.rate_limit) THEN
    NEW.controls_changed_by := timeout_center.current_actor();
    NEW.controls_changed_at := now();
    INSERT INTO timeout_center.audit_log (actor, action, kind, details)
    VALUES (NEW.controls_changed_by,
            CASE WHEN NEW.paused AND NOT OLD.paused THEN 'pause'
                 WHEN OLD.paused AND NOT NEW.paused THEN 'resume'
                 ELSE 'limit' END,
            NEW.kind,
            jsonb_build_object(
              'source', NEW.controls_source,
              'before', jsonb_build_object('paused', OLD.paused, 'maxRunningShards', OLD.max_running_shards, 'rateLimit', OLD.rate_limit),
              'after', jsonb_build_object('paused', NEW.paused, 'maxRunningShards', NEW.max_running_shards, 'rateLimit', NEW.rate_limit)));
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER kinds_controls_audit
  BEFORE UPDATE OF paused, max_running_shards, rate_limit ON timeout_center.kinds
  FOR EACH ROW EXECUTE FUNCTION timeout_center.kinds_controls_audit();

-- One row per kind: its controls, who changed them last, and what of it is running now.
CREATE VIEW timeout_center.kind_controls AS
SELECT k.kind, k.paused, k.max_running_shards, k.rate_limit, k.controls_source,
       k.controls_changed_by, k.controls_changed_at,
       (SELECT count(*) FROM timeout_center.shards sh WHERE sh.kind = k.kind AND sh.state = 'running')::int AS running_shards,
       (SELECT count(*) FROM timeout_center.shards sh WHERE sh.kind = k.kind AND sh.state = 'queued')::int AS queued_shards
  FROM timeout_center.kinds k;
