-- 0040_least_privilege: what the group roles need in the schema (issue 46, docs/roles.md). The
-- roles themselves, their grants, the row-level security of timeouts and the SECURITY DEFINER
-- attributes of the functions a writer's SQL reaches are not a numbered migration: `migrate` applies
-- them after the migrations, every time (src/db/roles.ts, sql/roles/), so that they name the roles
-- only where the roles exist and cover tables added later.
--
-- Catalog changes only: a nullable column (no rewrite), a column default (no rewrite), a new small
-- table and a function. The previous release runs on it unchanged (it never names them).

-- The login role behind each audit row, stamped by the database: the actor column is what the
-- caller says (timeout_center.actor, --actor, the console's user), db_user is the role it connected
-- as (session_user: a SECURITY DEFINER function does not change it). Rows written before this
-- migration keep NULL (unknown). The operator role may insert audit rows but not this column
-- (column privileges, sql/roles/operator.sql): its default is the only value it gets.
ALTER TABLE timeout_center.audit_log ADD COLUMN db_user text;
ALTER TABLE timeout_center.audit_log ALTER COLUMN db_user SET DEFAULT session_user;
COMMENT ON COLUMN timeout_center.audit_log.db_user IS
  'the database login role that wrote the row (session_user); NULL for rows written before 0040';

-- Writers limited to some kinds, where several teams share one center: a role named here (a login
-- role, or a group role its members inherit from) may see, schedule, cancel, reschedule and settle
-- the timeouts of the kinds listed for it, and no others. A writer role with no row here may use
-- every kind (one team per center needs no row). Read by the row-level security of timeouts and by
-- settle (writer_may below); written by a DBA (or the table's owner), never by a writer.
CREATE TABLE timeout_center.writer_kinds (
  role  text NOT NULL,
  kind  text NOT NULL REFERENCES timeout_center.kinds (kind) ON UPDATE CASCADE ON DELETE CASCADE,
  PRIMARY KEY (role, kind)
);
COMMENT ON TABLE timeout_center.writer_kinds IS
  'writers limited to some kinds: a role listed here (or whose group role is) may use only its kinds; a writer not listed may use every kind (docs/roles.md)';

-- May the session's login role (session_user, or a role it is a member of) write and see timeouts of
-- kind p_kind? True when no row of writer_kinds names one of its roles, or one names the kind. A
-- superuser is a member of every role: it is never limited. session_user, not current_user: inside
-- a SECURITY DEFINER function (settle) current_user is the function's owner.
-- SECURITY DEFINER (sql/roles/harden.sql) so that a writer, who may not read writer_kinds, can
-- be checked against it; every name is schema-qualified.
CREATE FUNCTION timeout_center.writer_may(p_kind text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) session_user)
      OR NOT EXISTS (SELECT 1 FROM timeout_center.writer_kinds w JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) w.role
                      WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
      OR EXISTS (SELECT 1 FROM timeout_center.writer_kinds w JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) w.role
                  WHERE w.kind OPERATOR(pg_catalog.=) p_kind AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
$$;

-- settle, as sql/0023 left it, answers for the session's kinds only: a writer limited to some
-- kinds (writer_kinds) that names another kind's timeout is told not_found, as if it did not
-- exist, and nothing runs. It runs with its owner's rights (sql/roles/harden.sql), so that a writer
-- can settle without any right on shards or the history; every name is schema-qualified.
CREATE OR REPLACE FUNCTION timeout_center.settle(p_kind text, p_biz_id text, p_wait_ms integer DEFAULT 1000)
RETURNS TABLE (outcome text, timeout_id bigint, state text, due_at timestamptz, available_at timestamptz,
               result text, shard_id bigint, detail text)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF p_kind IS NOT NULL AND NOT timeout_center.writer_may(p_kind) THEN
    RETURN QUERY SELECT 'not_found'::text, NULL::bigint, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::bigint,
                        pg_catalog.format('no live timeout of %s %s (never scheduled, or final already)', p_kind, p_biz_id);
    RETURN;
  END IF;
  RETURN QUERY SELECT r.outcome, r.timeout_id, r.state, r.due_at, r.available_at, r.result, r.shard_id, r.detail
                 FROM timeout_center.settle_run(p_kind, p_biz_id, p_wait_ms, NULL, NULL) r;
END $$;

-- The kinds the session may write (writer_may of each): what the row-level security of timeouts
-- compares kind with. A qual on the row's kind alone (kind = ANY (writable_kinds())), evaluated once
-- per statement, serves as an index condition: a writer's cancel (kind = ... AND biz_id = ...) stays
-- one index probe. A per-row function call in the policy would not (PostgreSQL applies the caller's
-- own quals on kind after it, enum equality not being leakproof, and so walked the whole
-- timeouts_one_live_per_biz index for one cancel).
CREATE FUNCTION timeout_center.writable_kinds() RETURNS timeout_center.kind[]
LANGUAGE sql STABLE AS $$
  SELECT coalesce(pg_catalog.array_agg(e), '{}')
    FROM pg_catalog.unnest(pg_catalog.enum_range(NULL::timeout_center.kind)) AS e
   WHERE timeout_center.writer_may(e::text)
$$;

-- Row-level security on timeouts is on only while writer_kinds limits someone: every role that is
-- not the table's owner pays for it, and a policy, even a constant true one, keeps PostgreSQL from
-- using a caller's own condition on kind (enum equality is not leakproof) as an index condition:
-- the claim of a login holding timeout_center_engine walked the whole table (docs/roles.md). So it
-- is switched on by the first row of writer_kinds and off by the last (the trigger below), and
-- only where the policies are there (src/db/roles.ts creates them once the four roles exist); a
-- deployment that limits writers gives its engine login BYPASSRLS (`migrate` says so).
CREATE FUNCTION timeout_center.apply_writer_kinds() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  want boolean := EXISTS (SELECT 1 FROM timeout_center.writer_kinds)
              AND (SELECT pg_catalog.count(*) FROM pg_catalog.pg_policy p
                    WHERE p.polrelid OPERATOR(pg_catalog.=) 'timeout_center.timeouts'::pg_catalog.regclass
                      AND p.polname OPERATOR(pg_catalog.~~) 'timeouts\_%') OPERATOR(pg_catalog.>=) 5;
  have boolean := (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) 'timeout_center.timeouts'::pg_catalog.regclass);
BEGIN
  IF want AND NOT have THEN
    EXECUTE 'ALTER TABLE timeout_center.timeouts ENABLE ROW LEVEL SECURITY';
  ELSIF have AND NOT want THEN
    EXECUTE 'ALTER TABLE timeout_center.timeouts DISABLE ROW LEVEL SECURITY';
  END IF;
END $$;

CREATE FUNCTION timeout_center.writer_kinds_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM timeout_center.apply_writer_kinds();
  RETURN NULL;
END $$;

CREATE TRIGGER writer_kinds_changed AFTER INSERT OR DELETE OR TRUNCATE ON timeout_center.writer_kinds
  FOR EACH STATEMENT EXECUTE FUNCTION timeout_center.writer_kinds_changed();
