-- 0050_history_partitions: the functions that turn timeout_center.done_timeouts into a table
-- partitioned by day of finished_at, and that keep it so (issue 45, docs/vacuum-horizon.md "Rotate
-- instead of deleting"). Deleting old history row by row costs a read of every page range that a
-- refilled table's BRIN index selects, i.e. of the whole table, every run; dropping a day's
-- partition costs the same whatever its size and leaves no dead rows.
--
-- This file only creates functions (catalog changes; nothing the previous release reads changes).
-- 0051 calls them, statement by statement, to convert the table online:
--   1. history_cut_add(): CHECK (finished_at < X) NOT VALID, X the UTC day boundary a day or more
--      ahead (brief ACCESS EXCLUSIVE under the runner's lock_timeout; no scan);
--   2. history_cut_validate(): VALIDATE CONSTRAINT, a scan under SHARE UPDATE EXCLUSIVE: inserts
--      go on meanwhile (and keep going to the old table: every row they write is < X);
--   3. history_partition(): one short transaction: the table is renamed done_timeouts_before_<X>,
--      a parent PARTITION BY RANGE (finished_at) takes its name, columns, defaults, checks,
--      comments and grants, the old table is attached FROM (MINVALUE) TO (X) (the validated check
--      spares the scan; its BRIN index becomes the parent's index's partition), daily partitions
--      from X and a DEFAULT partition are created, and the views on the history are re-created
--      from their own definitions so that they read the parent.
-- Then retention (src/retention/retention.ts) calls rotate_history() and purge_history().
--
-- The primary key stays per partition (id, as before: a key over the parent would have to include
-- finished_at). A timeout id enters the history once, as its row leaves timeouts, so uniqueness
-- within a day holds the way it held in one table; no statement of this release or the previous
-- one writes the history with ON CONFLICT. Look-ups by id probe one index per partition.
--
-- On a database with the citus extension nothing is converted: the Citus layout (sql/citus/
-- layout.sql) distributes the history on its bucket with a key (id, bucket) that a table
-- partitioned by finished_at cannot have; retention deletes it by batch there, as before.
--
-- The functions run with their owner's rights (sql/roles/harden.sql): creating, attaching and
-- dropping partitions is the table owner's, and retention runs as timeout_center_engine.

-- The history is not partitioned yet and may be here (no citus: the Citus layout keeps it whole).
CREATE FUNCTION timeout_center.history_convertible() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT c.relkind = 'r'
         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'citus')
    FROM pg_catalog.pg_class c
   WHERE c.oid = pg_catalog.to_regclass('timeout_center.done_timeouts')
$$;

-- X of step 1, read back from the constraint (NULL: no constraint).
CREATE FUNCTION timeout_center.history_cut() RETURNS timestamptz
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT (pg_catalog.regexp_match(pg_catalog.pg_get_constraintdef(k.oid), '''([^'']+)'''))[1]::timestamptz
    FROM pg_catalog.pg_constraint k
   WHERE k.conrelid = pg_catalog.to_regclass('timeout_center.done_timeouts')
     AND k.conname = 'done_timeouts_before_cut'
$$;

-- Step 1. Idempotent: a constraint left by an earlier run is kept while its X is more than an hour
-- ahead; closer than that (a conversion stopped long ago), it is replaced by a later X, so that
-- step 3 always runs before the old table starts refusing new rows.
CREATE FUNCTION timeout_center.history_cut_add() RETURNS timestamptz
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_cut timestamptz := timeout_center.history_cut();
BEGIN
  IF NOT coalesce(timeout_center.history_convertible(), false) THEN
    RETURN NULL;
  END IF;
  IF v_cut IS NOT NULL AND v_cut > pg_catalog.now() + interval '1 hour' THEN
    RETURN v_cut;
  END IF;
  IF v_cut IS NOT NULL THEN
    ALTER TABLE timeout_center.done_timeouts DROP CONSTRAINT done_timeouts_before_cut;
  END IF;
  -- The start of the UTC day after tomorrow: at least a day ahead.
  v_cut := (pg_catalog.date_trunc('day', pg_catalog.now() AT TIME ZONE 'UTC') + interval '2 days') AT TIME ZONE 'UTC';
  EXECUTE pg_catalog.format('ALTER TABLE timeout_center.done_timeouts ADD CONSTRAINT done_timeouts_before_cut CHECK (finished_at < %L::timestamptz) NOT VALID', v_cut);
  RETURN v_cut;
END $$;

-- Step 2. Without a lock_timeout, as the runner does for VALIDATE: it waits harmlessly (SHARE
-- UPDATE EXCLUSIVE conflicts with no INSERT, UPDATE or DELETE).
CREATE FUNCTION timeout_center.history_cut_validate() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF coalesce(timeout_center.history_convertible(), false)
     AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                  WHERE k.conrelid = 'timeout_center.done_timeouts'::pg_catalog.regclass
                    AND k.conname = 'done_timeouts_before_cut' AND NOT k.convalidated) THEN
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
    ALTER TABLE timeout_center.done_timeouts VALIDATE CONSTRAINT done_timeouts_before_cut;
  END IF;
END $$;

-- A daily partition [p_day, p_day + 1 day) (UTC), built beside the parent and attached: ATTACH
-- takes SHARE UPDATE EXCLUSIVE on the parent (inserts go on) and scans only the DEFAULT
-- partition (normally empty). Its CHECK spares the scan of the new table. Returns its name, NULL
-- when it exists already.
CREATE FUNCTION timeout_center.add_history_partition(p_day date) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_name text := 'done_timeouts_' || pg_catalog.to_char(p_day, 'YYYYMMDD');
  v_from timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
  v_to timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
  IF pg_catalog.to_regclass('timeout_center.' || v_name) IS NOT NULL THEN
    RETURN NULL;
  END IF;
  EXECUTE pg_catalog.format('CREATE TABLE timeout_center.%I (LIKE timeout_center.done_timeouts INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)', v_name);
  EXECUTE pg_catalog.format('ALTER TABLE timeout_center.%I ADD CONSTRAINT %I PRIMARY KEY (id), ADD CONSTRAINT %I CHECK (finished_at >= %L::timestamptz AND finished_at < %L::timestamptz)',
                            v_name, v_name || '_pkey', v_name || '_range', v_from, v_to);
  EXECUTE pg_catalog.format('ALTER TABLE timeout_center.done_timeouts ATTACH PARTITION timeout_center.%I FOR VALUES FROM (%L) TO (%L)', v_name, v_from, v_to);
  RETURN v_name;
END $$;

-- Step 3, in the one transaction of its statement (the runner's lock_timeout bounds each wait).
CREATE FUNCTION timeout_center.history_partition() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_cut timestamptz := timeout_center.history_cut();
  v_old text;
  v_defs text[];
  v_acl record;
  v_day date;
BEGIN
  IF NOT coalesce(timeout_center.history_convertible(), false) THEN
    RETURN NULL;
  END IF;
  IF v_cut IS NULL OR NOT (SELECT k.convalidated FROM pg_catalog.pg_constraint k
                            WHERE k.conrelid = 'timeout_center.done_timeouts'::pg_catalog.regclass
                              AND k.conname = 'done_timeouts_before_cut') THEN
    RAISE EXCEPTION 'done_timeouts has no validated done_timeouts_before_cut constraint: run history_cut_add() and history_cut_validate() first';
  END IF;
  v_old := 'done_timeouts_before_' || pg_catalog.to_char(v_cut AT TIME ZONE 'UTC', 'YYYYMMDD');
  -- The views that read the history, with their definitions written with schema-qualified names
  -- (an empty search_path), taken before the rename: re-created below, they read the parent.
  PERFORM pg_catalog.set_config('search_path', '', true);
  SELECT pg_catalog.array_agg(DISTINCT v.oid::pg_catalog.regclass::text || ' AS ' || pg_catalog.pg_get_viewdef(v.oid))
    INTO v_defs
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
    JOIN pg_catalog.pg_class v ON v.oid = r.ev_class
   WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
     AND d.refobjid = 'timeout_center.done_timeouts'::pg_catalog.regclass
     AND v.oid <> 'timeout_center.done_timeouts'::pg_catalog.regclass;
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

  EXECUTE pg_catalog.format('ALTER TABLE timeout_center.done_timeouts RENAME TO %I', v_old);
  EXECUTE pg_catalog.format('ALTER INDEX timeout_center.done_timeouts_pkey RENAME TO %I', v_old || '_pkey');
  EXECUTE pg_catalog.format('ALTER INDEX timeout_center.done_timeouts_finished RENAME TO %I', v_old || '_finished');
  EXECUTE pg_catalog.format('CREATE TABLE timeout_center.done_timeouts (LIKE timeout_center.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (finished_at)', v_old);
  ALTER TABLE timeout_center.done_timeouts DROP CONSTRAINT done_timeouts_before_cut;
  COMMENT ON TABLE timeout_center.done_timeouts IS
    'done timeouts (sql/0010), one partition per UTC day of finished_at (sql/0050): retention drops whole days';
  -- The same BRIN index as before, as a partitioned index: ATTACH PARTITION adopts the old table's
  -- (same definition) without building anything, each new partition gets its own.
  CREATE INDEX done_timeouts_finished ON timeout_center.done_timeouts USING brin (finished_at) WITH (autosummarize = on);
  -- The grants of the old table, on the parent (access through the parent checks the parent's).
  FOR v_acl IN
    SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(g.rolname) END AS grantee
      FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
      LEFT JOIN pg_catalog.pg_roles g ON g.oid = a.grantee
     WHERE c.oid = ('timeout_center.' || pg_catalog.quote_ident(v_old))::pg_catalog.regclass
       AND a.grantee <> c.relowner
  LOOP
    EXECUTE pg_catalog.format('GRANT %s ON timeout_center.done_timeouts TO %s', v_acl.privilege_type, v_acl.grantee);
  END LOOP;
  EXECUTE pg_catalog.format('ALTER TABLE timeout_center.done_timeouts ATTACH PARTITION timeout_center.%I FOR VALUES FROM (MINVALUE) TO (%L)', v_old, v_cut);
  -- A safety net: a row of a day retention has not created yet goes here instead of failing.
  CREATE TABLE timeout_center.done_timeouts_default PARTITION OF timeout_center.done_timeouts DEFAULT;
  ALTER TABLE timeout_center.done_timeouts_default ADD CONSTRAINT done_timeouts_default_pkey PRIMARY KEY (id);
  -- Three days from X (retention keeps creating them ahead).
  FOR v_day IN SELECT pg_catalog.generate_series(0, 2) + (v_cut AT TIME ZONE 'UTC')::date LOOP
    PERFORM timeout_center.add_history_partition(v_day);
  END LOOP;
  IF v_defs IS NOT NULL THEN
    FOR i IN 1 .. pg_catalog.array_length(v_defs, 1) LOOP
      EXECUTE 'CREATE OR REPLACE VIEW ' || v_defs[i];
    END LOOP;
  END IF;
  RETURN v_old;
END $$;

-- Retention's rotation (src/retention/retention.ts), one call a run: the daily partitions up to
-- p_days_ahead days after today (UTC) are created, then every partition wholly older than p_cutoff
-- (its upper bound at or before it: the daily ones and the old table of the conversion) is
-- detached and dropped. Each change waits for its locks at most p_lock_timeout_ms and is otherwise
-- left to the next run ('skipped', with the reason). DETACH ... CONCURRENTLY cannot be used while
-- a DEFAULT partition exists (PostgreSQL refuses it), so DETACH takes ACCESS EXCLUSIVE on the
-- parent for the moment of the detach and drop, queued at most the lock_timeout. Drops come last:
-- that lock is held from the first drop to the end of this statement only.
-- Returns one row per change: action (created, dropped, skipped), the partition, and its row count
-- as the planner estimates it (reltuples; dropped ones only).
CREATE FUNCTION timeout_center.rotate_history(p_cutoff timestamptz, p_days_ahead integer, p_lock_timeout_ms integer)
RETURNS TABLE (action text, partition_name text, est_rows bigint, detail text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_today date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
  v_day date;
  v_name text;
  v_part record;
BEGIN
  IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass('timeout_center.done_timeouts'))
     IS DISTINCT FROM 'p' THEN
    RETURN;
  END IF;
  PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text, true);
  FOR v_day IN SELECT pg_catalog.generate_series(0, p_days_ahead) + v_today LOOP
    -- Days the conversion's old table still covers are not created.
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhrelid
                           WHERE i.inhparent = 'timeout_center.done_timeouts'::pg_catalog.regclass
                             AND p.relname ~ '^done_timeouts_before_\d{8}$'
                             AND pg_catalog.to_date(pg_catalog.right(p.relname::text, 8), 'YYYYMMDD') > v_day);
    BEGIN
      v_name := timeout_center.add_history_partition(v_day);
      IF v_name IS NOT NULL THEN
        action := 'created'; partition_name := v_name; est_rows := 0; detail := NULL;
        RETURN NEXT;
      END IF;
    EXCEPTION WHEN lock_not_available OR check_violation OR deadlock_detected THEN
      -- check_violation: the DEFAULT partition holds rows of that day (retention stopped for days);
      -- they are deleted from there by batch when they age out, and later days get partitions.
      action := 'skipped'; partition_name := 'done_timeouts_' || pg_catalog.to_char(v_day, 'YYYYMMDD'); est_rows := NULL; detail := SQLERRM;
      RETURN NEXT;
    END;
  END LOOP;
  FOR v_part IN
    SELECT p.relname::text AS name, GREATEST(p.reltuples, 0)::bigint AS est,
           CASE WHEN p.relname ~ '^done_timeouts_before_\d{8}$'
                THEN pg_catalog.to_date(pg_catalog.right(p.relname::text, 8), 'YYYYMMDD')
                ELSE pg_catalog.to_date(pg_catalog.right(p.relname::text, 8), 'YYYYMMDD') + 1 END AS upper_day
      FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhrelid
     WHERE i.inhparent = 'timeout_center.done_timeouts'::pg_catalog.regclass
       AND p.relname ~ '^done_timeouts_(before_)?\d{8}$'
     ORDER BY 3
  LOOP
    CONTINUE WHEN (v_part.upper_day::timestamp AT TIME ZONE 'UTC') > p_cutoff;
    BEGIN
      EXECUTE pg_catalog.format('ALTER TABLE timeout_center.done_timeouts DETACH PARTITION timeout_center.%I', v_part.name);
      EXECUTE pg_catalog.format('DROP TABLE timeout_center.%I', v_part.name);
      action := 'dropped'; partition_name := v_part.name; est_rows := v_part.est; detail := NULL;
      RETURN NEXT;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
      action := 'skipped'; partition_name := v_part.name; est_rows := NULL; detail := SQLERRM;
      RETURN NEXT;
    END;
  END LOOP;
END $$;

-- One batch of the rows older than p_cutoff that rotate_history cannot drop yet: those of the
-- conversion's old table before it has wholly aged out, and of the DEFAULT partition. The same
-- statement as purge_done_timeouts.sql, on those partitions only (never a daily one: a day that
-- could not be dropped this run is dropped by the next). Returns the rows deleted.
CREATE FUNCTION timeout_center.purge_history(p_cutoff timestamptz, p_batch integer) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_name text;
  v_n bigint;
  v_total bigint := 0;
BEGIN
  FOR v_name IN
    SELECT p.relname::text
      FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhrelid
     WHERE i.inhparent = pg_catalog.to_regclass('timeout_center.done_timeouts')
       AND (p.relname ~ '^done_timeouts_before_\d{8}$' OR p.relname = 'done_timeouts_default')
     ORDER BY 1
  LOOP
    EXIT WHEN v_total >= p_batch;
    EXECUTE pg_catalog.format(
      'DELETE FROM timeout_center.%1$I d WHERE d.id = ANY (ARRAY(SELECT id FROM timeout_center.%1$I WHERE finished_at < $1 LIMIT $2))', v_name)
      USING p_cutoff, p_batch - v_total;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
  END LOOP;
  RETURN v_total;
END $$;
