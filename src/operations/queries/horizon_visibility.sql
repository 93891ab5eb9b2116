-- horizon_visibility: whether this session's role sees every session's snapshot in
-- pg_stat_activity (pg_read_all_stats, which pg_monitor grants; a superuser has it). Without it,
-- other roles' sessions show no backend_xmin and vacuum_horizon.sql cannot name them.
SELECT current_user::text AS role, pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all
