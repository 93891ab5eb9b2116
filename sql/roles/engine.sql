-- engine: coordinators, workers, the API and the console (docs/roles.md). Every table of the
-- schema (tables added by later migrations too: `migrate` grants this again each time), except
-- what only migrate and a DBA write: the migrations ledger, the writers' kinds, and the audit
-- trail, which it may add to but never rewrite.
GRANT USAGE ON SCHEMA timeout_center TO timeout_center_engine;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA timeout_center TO timeout_center_engine;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA timeout_center TO timeout_center_engine;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA timeout_center TO timeout_center_engine;
REVOKE INSERT, UPDATE, DELETE ON timeout_center.migrations, timeout_center.writer_kinds FROM timeout_center_engine;
REVOKE UPDATE, DELETE ON timeout_center.audit_log FROM timeout_center_engine;
