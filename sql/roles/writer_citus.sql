-- writer on a Citus layout: as writer.sql, but Citus refuses column privileges on a distributed
-- table ("grant/revoke on column list is currently unsupported"), so the insert and the update of
-- timeouts are granted on the whole row. What a writer may not do stays refused where the database
-- checks it: a new timeout must be pending (timeouts_before_write), a dispatched one is not
-- cancelled, and row-level security keeps it to its kinds and to the states pending, dispatched
-- and cancelled; its attempts, shard and result are not (docs/roles.md, "On Citus").
GRANT USAGE ON SCHEMA timeout_center TO timeout_center_writer;
GRANT SELECT, INSERT, UPDATE ON timeout_center.timeouts TO timeout_center_writer;
GRANT SELECT ON timeout_center.layout TO timeout_center_writer;
