-- prepared_types: the parameter types PostgreSQL inferred for a handler's statement, prepared as
-- tc_check_sql on this session just before (sql-handler.ts sqlParameterTypes: ids = ANY($1) makes
-- $1 bigint[]); whether a SQL handler can take the batch form depends on them.
SELECT parameter_types::text[] AS types FROM pg_prepared_statements WHERE name = 'tc_check_sql'
