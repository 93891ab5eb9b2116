-- oldest_snapshot: how old (s) the oldest transaction holding a snapshot in this database is,
-- other than this session's, prepared transactions included (0: none). REINDEX CONCURRENTLY
-- waits for every such transaction to end, holding a lock that keeps autovacuum off the table
-- meanwhile, so the reindexer (reindexer.ts) starts none while one is old.
SELECT greatest(coalesce((SELECT extract(epoch FROM clock_timestamp() - min(a.xact_start))
                            FROM pg_stat_activity a
                           WHERE a.datname = current_database() AND a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()), 0),
                coalesce((SELECT extract(epoch FROM clock_timestamp() - min(p.prepared))
                            FROM pg_prepared_xacts p WHERE p.database = current_database()), 0))::float8 AS seconds
