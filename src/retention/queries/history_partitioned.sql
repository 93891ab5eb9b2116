-- history_partitioned: is timeout_center.done_timeouts partitioned by day (sql/0051)? Not on the
-- Citus layout, nor before that migration (the previous release's schema).
SELECT coalesce((SELECT c.relkind = 'p' FROM pg_class c WHERE c.oid = to_regclass('timeout_center.done_timeouts')), false) AS partitioned
