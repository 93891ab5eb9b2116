-- harden: the functions that a writer's statements reach (triggers on timeouts, the row-level
-- security check, settle) and that read or write what a writer may not, run with their owner's
-- rights (SECURITY DEFINER) and a fixed search_path, so that a caller's own schema, temporary
-- table, function or operator can never stand in for ours (their bodies name every object with
-- its schema). Run by `migrate` after the migrations and the Citus layout, every time: a
-- CREATE OR REPLACE of one of them (sql/citus/) resets its attributes, and this sets them again.
-- No function of the schema is callable by PUBLIC: each group role is granted what it needs
-- (src/db/roles.ts), a role the center does not know gets nothing.
ALTER FUNCTION timeout_center.timeouts_in_their_store() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION timeout_center.refuse_held_change() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION timeout_center.writer_may(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION timeout_center.writable_kinds() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- A DBA's row in writer_kinds switches row-level security on timeouts on (ALTER TABLE: owner only).
ALTER FUNCTION timeout_center.apply_writer_kinds() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION timeout_center.writer_kinds_changed() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- A process's start writes the config's kinds and rules (syncKinds, syncRoutes): a new kind adds
-- its enum label, a changed rule recompiles the stamp trigger, DDL that only the owner may run.
ALTER FUNCTION timeout_center.kinds_keep_labels() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION timeout_center.restamp_targets() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- settle runs the kind's SQL handler, written for the config (UPDATE orders ... with unqualified
-- table names, as the workers run it): public is searched after pg_catalog and before pg_temp, so a
-- caller's temporary table never stands in for the orders (a schema a caller may create objects in
-- must not be public: PostgreSQL 15 and later revoke CREATE on it from PUBLIC).
ALTER FUNCTION timeout_center.settle(text, text, integer) SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp;
-- Retention of the history (sql/0050): partitions are created, attached, detached and dropped
-- by the table's owner only; the engine's coordinator and an operator's purge call these two.
ALTER FUNCTION timeout_center.rotate_history(timestamptz, integer, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION timeout_center.purge_history(timestamptz, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA timeout_center FROM PUBLIC;
