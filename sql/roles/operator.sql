-- operator: what the CLI's and the console's actions do (retry, cancel, reschedule, pause, resume,
-- limit, purge), each recorded in audit_log, whose db_user column the database fills with the
-- operator's login role. Reads every table; writes the timeouts it acts on, the controls of kinds
-- and business databases, and what purge deletes; adds audit rows, never rewrites them.
GRANT USAGE ON SCHEMA timeout_center TO timeout_center_operator;
GRANT SELECT ON ALL TABLES IN SCHEMA timeout_center TO timeout_center_operator;
GRANT UPDATE, DELETE ON timeout_center.timeouts TO timeout_center_operator;
GRANT DELETE ON timeout_center.done_timeouts, timeout_center.scans, timeout_center.workers TO timeout_center_operator;
-- purge_scans.sql locks the scans it deletes (FOR UPDATE SKIP LOCKED, so two purges never wait on
-- each other), and PostgreSQL asks for UPDATE on at least one column to lock a row: one column,
-- on a table the operator may delete from anyway.
GRANT UPDATE (reduced_at) ON timeout_center.scans TO timeout_center_operator;
GRANT UPDATE (paused, max_running_shards, rate_limit, controls_source, controls_changed_by, controls_changed_at)
  ON timeout_center.kinds TO timeout_center_operator;
GRANT UPDATE (rate_limit, controls_source, controls_changed_by, controls_changed_at) ON timeout_center.targets TO timeout_center_operator;
GRANT INSERT (at, actor, action, kind, target, details, store, store_audit_id) ON timeout_center.audit_log TO timeout_center_operator;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA timeout_center TO timeout_center_operator;
