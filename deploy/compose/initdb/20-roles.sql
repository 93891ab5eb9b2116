-- Least privilege for the compose fleet (docs/roles.md). Runs once, when the PostgreSQL volume is
-- first created, after 10-orders.sql. The four group roles are created here as `timeout-center
-- migrate` would (NOLOGIN, marked as the center's by their comment), so that the logins below can
-- be granted them before the first migrate; migrate then grants each its privileges, every run.
--   postgres      the schema's owner: the migrate service only
--   tc_engine     coordinators, workers and the console (timeout_center_engine)
--   tc_shop       the order generator, a business service (timeout_center_writer)
-- No passwords: the compose PostgreSQL trusts its network (POSTGRES_HOST_AUTH_METHOD: trust).
CREATE ROLE timeout_center_writer NOLOGIN;
COMMENT ON ROLE timeout_center_writer IS 'timeout-center group role, kept by timeout-center migrate (docs/roles.md)';
CREATE ROLE timeout_center_reader NOLOGIN;
COMMENT ON ROLE timeout_center_reader IS 'timeout-center group role, kept by timeout-center migrate (docs/roles.md)';
CREATE ROLE timeout_center_operator NOLOGIN;
COMMENT ON ROLE timeout_center_operator IS 'timeout-center group role, kept by timeout-center migrate (docs/roles.md)';
CREATE ROLE timeout_center_engine NOLOGIN;
COMMENT ON ROLE timeout_center_engine IS 'timeout-center group role, kept by timeout-center migrate (docs/roles.md)';

CREATE ROLE tc_engine LOGIN;
GRANT timeout_center_engine TO tc_engine;
CREATE ROLE tc_shop LOGIN;
GRANT timeout_center_writer TO tc_shop;

-- The shop's own tables: the handlers (run by the workers) close orders, the generator creates
-- and pays them, numbering them from its sequence.
GRANT SELECT, UPDATE ON orders TO tc_engine;
GRANT SELECT, INSERT, UPDATE ON orders TO tc_shop;
CREATE SEQUENCE IF NOT EXISTS orders_generator_seq;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE orders_generator_seq TO tc_shop;
