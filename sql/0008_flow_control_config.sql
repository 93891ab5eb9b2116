-- 0008_flow_control_config: the config file's flow-control defaults beside the live values, and
-- the backlog marked paused.
--
-- 0006 gave each kind its live controls (paused, max_running_shards, rate_limit) and where they
-- came from (controls_source). A run-time change (SQL, CLI, console) survives restarts because
-- process starts write the config's values only while controls_source = 'config'. To reset a kind
-- to its config (`timeout-center limit <kind> --reset`) without reading the config file, every
-- process start also writes the config's values here, whatever the source.
ALTER TABLE timeout_center.kinds
  ADD COLUMN config_paused              boolean NOT NULL DEFAULT false,
  ADD COLUMN config_max_running_shards  integer CHECK (config_max_running_shards > 0),
  ADD COLUMN config_rate_limit          numeric CHECK (config_rate_limit > 0);

COMMENT ON COLUMN timeout_center.kinds.config_paused IS 'the config file''s paused value (written at every process start); reset copies it to paused';
COMMENT ON COLUMN timeout_center.kinds.config_max_running_shards IS 'the config file''s maxRunningShards (written at every process start)';
COMMENT ON COLUMN timeout_center.kinds.config_rate_limit IS 'the config file''s rateLimit (written at every process start)';

-- Kinds migrated before this file: their live values are the best guess of their config.
UPDATE timeout_center.kinds
   SET config_paused = paused, config_max_running_shards = max_running_shards, config_rate_limit = rate_limit
 WHERE controls_source = 'config';

-- The kind_controls view gains the config's values (columns appended: CREATE OR REPLACE keeps
-- the existing ones in place).
CREATE OR REPLACE VIEW timeout_center.kind_controls AS
SELECT k.kind, k.paused, k.max_running_shards, k.rate_limit, k.controls_source,
       k.controls_changed_by, k.controls_changed_at,
       (SELECT count(*) FROM timeout_center.shards sh WHERE sh.kind = k.kind AND sh.state = 'running')::int AS running_shards,
       (SELECT count(*) FROM timeout_center.shards sh WHERE sh.kind = k.kind AND sh.state = 'queued')::int AS queued_shards,
       k.config_paused, k.config_max_running_shards, k.config_rate_limit
  FROM timeout_center.kinds k;

-- A paused kind keeps showing in the backlog (its due timeouts wait in the table), marked paused,
-- so dashboards and the lag alert tell "paused on purpose" from "stuck".
CREATE OR REPLACE VIEW timeout_center.backlog AS
SELECT k.kind, p.pending_due, f.in_flight,
       least(p.oldest_due_at, f.oldest_due_at) AS oldest_due_at,
       now() - least(p.oldest_due_at, f.oldest_due_at) AS oldest_lag,
       k.paused
  FROM timeout_center.kinds k
 CROSS JOIN LATERAL (SELECT count(*) AS pending_due, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind AND t.state = 'pending' AND t.available_at <= now()) p
 CROSS JOIN LATERAL (SELECT count(*) AS in_flight, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind AND t.state = 'dispatched' AND t.shard_id IS NOT NULL) f
 WHERE p.pending_due > 0 OR f.in_flight > 0;
