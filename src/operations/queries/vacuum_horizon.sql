-- vacuum_horizon: what holds back VACUUM in this database (docs/vacuum-horizon.md), oldest first.
-- A row deleted after the oldest of these began stays on disk (dead, not removable) until it ends:
--   backend               a session of this database with a snapshot (backend_xmin) or a
--                         transaction id (backend_xid: a write transaction left open); since
--                         PostgreSQL 14 sessions of other databases do not hold this one's tables.
--                         Autovacuum's own VACUUM is left out (it never holds another VACUUM);
--                         WAL senders are reported as standby feedback.
--   standby_feedback      a standby with hot_standby_feedback reporting its oldest query
--                         (pg_stat_replication.backend_xmin): holds every database of the server.
--   replication_slot      a slot's xmin (a physical slot fed by a standby's feedback: every table
--                         of every database) or catalog_xmin (a logical slot: the system catalogs
--                         only; its cost is mostly the WAL it keeps).
--   prepared_transaction  PREPARE TRANSACTION never committed or rolled back (pg_prepared_xacts).
-- Age in transactions (age(xmin)) always; in seconds where PostgreSQL knows a time (a backend's
-- xact_start, a prepared transaction's prepared time). Needs no superuser: pg_stat_activity shows
-- other roles' sessions (their xmin and query) only to pg_read_all_stats (granted by pg_monitor);
-- horizon_visibility.sql says whether this role sees them. Only catalog views: runs in a business
-- database without the center's schema too.
SELECT holder, pid, application_name, user_name, state, backend_type, xact_start, query_start, query,
       client_addr, slot, slot_type, slot_active, scope, gid, prepared_at, xid_age, seconds
  FROM (
    SELECT 'backend' AS holder, a.pid, nullif(a.application_name, '') AS application_name, a.usename::text AS user_name,
           a.state, a.backend_type, a.xact_start, a.query_start, left(a.query, 500) AS query, host(a.client_addr) AS client_addr,
           NULL::text AS slot, NULL::text AS slot_type, NULL::boolean AS slot_active, 'all tables' AS scope,
           NULL::text AS gid, NULL::timestamptz AS prepared_at,
           greatest(age(a.backend_xmin), age(a.backend_xid))::int8 AS xid_age,
           extract(epoch FROM now() - a.xact_start)::float8 AS seconds
      FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
       AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
       AND a.backend_type <> 'walsender'
       AND NOT (a.backend_type = 'autovacuum worker' AND a.query LIKE 'autovacuum: VACUUM%')
    UNION ALL
    SELECT 'standby_feedback', r.pid, nullif(r.application_name, ''), r.usename::text, r.state, 'walsender', NULL, NULL, NULL,
           host(r.client_addr), NULL, NULL, NULL, 'every database', NULL, NULL, age(r.backend_xmin)::int8, NULL
      FROM pg_stat_replication r
     WHERE r.backend_xmin IS NOT NULL
    UNION ALL
    SELECT 'replication_slot', s.active_pid, NULL, NULL, CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL, NULL, NULL, NULL,
           NULL, s.slot_name::text, s.slot_type, s.active, 'every database', NULL, NULL, age(s.xmin)::int8, NULL
      FROM pg_replication_slots s
     WHERE s.xmin IS NOT NULL
    UNION ALL
    SELECT 'replication_slot', s.active_pid, NULL, NULL, CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL, NULL, NULL, NULL,
           NULL, s.slot_name::text, s.slot_type, s.active, 'system catalogs', NULL, NULL, age(s.catalog_xmin)::int8, NULL
      FROM pg_replication_slots s
     WHERE s.catalog_xmin IS NOT NULL
    UNION ALL
    SELECT 'prepared_transaction', NULL, NULL, p.owner::text, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, 'all tables', p.gid, p.prepared, age(p.transaction)::int8,
           extract(epoch FROM now() - p.prepared)::float8
      FROM pg_prepared_xacts p
     WHERE p.database = current_database()
  ) h
 ORDER BY xid_age DESC, seconds DESC NULLS LAST
 LIMIT 20
