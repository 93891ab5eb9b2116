-- 0024_processes: every long-running process of the fleet, with its version, so that operators
-- see which code runs (`status`, the console) and `migrate` knows which versions are live before
-- it changes what they read (docs/upgrading.md).
--
-- Each coordinator, worker, api and console process inserts its row at start and touches
-- last_seen_at every 5 s; one not seen for 15 s, or stopped, is gone (the window of
-- live_workers). Processes of the code before 1.0.0 do not write here: `migrate` finds them in
-- live_workers and by their application_name in pg_stat_activity (src/release/fleet.ts).
-- A new table beside the others: nothing older reads it, nothing is locked but the new table.
CREATE TABLE timeout_center.processes (
  process_id      text PRIMARY KEY,
  role            text NOT NULL,
  version         text NOT NULL,
  -- The newest migration this process's build knows: a process with a lower one runs on a
  -- schema newer than it (allowed while the schema's oldest code is not above its version).
  schema_version  integer NOT NULL,
  host            text NOT NULL,
  pid             integer NOT NULL,
  started_at      timestamptz NOT NULL DEFAULT now(),
  last_seen_at    timestamptz NOT NULL DEFAULT now(),
  stopped_at      timestamptz
);

CREATE VIEW timeout_center.live_processes AS
SELECT p.process_id, p.role, p.version, p.schema_version, p.host, p.pid, p.started_at, p.last_seen_at
  FROM timeout_center.processes p
 WHERE p.stopped_at IS NULL AND p.last_seen_at > now() - interval '15 seconds';

COMMENT ON TABLE timeout_center.processes IS 'the fleet''s long-running processes and their versions (sql/0024_processes.sql)';
COMMENT ON VIEW timeout_center.live_processes IS 'processes seen in the last 15 s and not stopped, with the version each runs';
