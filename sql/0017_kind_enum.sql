-- 0017_kind_enum: a pending timeout in at most 200 bytes (issue 27, docs/scale.md "Storage per
-- pending timeout"): timeouts.kind becomes an enum, and the table's columns are stored in
-- alignment order.
--
-- kind was text: 13 bytes in every heap row for 'order.unpaid', and the same in every entry of
-- timeouts_one_live_per_biz (kind, biz_id) and timeouts_due_by_kind (kind, available_at). As the
-- enum timeout_center.kind it takes 4 bytes, and to SQL it still reads and writes as its name:
-- the README's INSERT ... VALUES ('order.unpaid', ...), ON CONFLICT (kind, biz_id), and
-- WHERE kind = 'order.unpaid' are unchanged (an untyped literal or parameter takes the column's
-- type). A value typed text (a text column, a driver that binds strings as varchar) is taken by
-- INSERT and UPDATE through the assignment casts below; a comparison with a text-typed value needs
-- a cast to timeout_center.kind (the engine's statements have it).
--
-- The labels are the rows of timeout_center.kinds: a trigger there adds a label for every kind
-- inserted (syncKinds at migrate and every process start, or an INSERT by hand), so an INSERT of
-- a kind no config declared fails on the enum's input ("invalid input value for enum
-- timeout_center.kind") instead of the foreign key timeouts_kind_fkey, which is gone (an enum
-- column cannot reference a text one). A label added inside a transaction cannot be used before
-- that transaction commits (PostgreSQL's rule for enums). Labels are never removed; deleting a
-- kinds row that timeouts still reference is refused as before (ON DELETE RESTRICT, now a
-- trigger), and renaming a kind renames its label (ON UPDATE CASCADE). Labels are kept in the
-- order of their names, so ORDER BY kind orders as the text did.
--
-- Only timeouts.kind changes: kinds, shards, kind_routes, kind_stores, done_timeouts, audit_log
-- keep kind text (none of them is per pending timeout). Views: all_timeouts shows kind as text (its
-- two halves must agree); backlog joins kinds through a cast; failed_timeouts shows the enum.
--
-- The column order: 8-byte columns first, then 4-byte, then variable-length (no padding inside a
-- pending row: 56 bytes of data instead of 72). PostgreSQL cannot reorder columns in place, so the
-- table is rebuilt: a new table, the rows copied, the old one dropped and the new one renamed, its
-- indexes, constraints, triggers, identity and views recreated under the same names. This holds
-- an ACCESS EXCLUSIVE lock on timeouts for the copy: writers wait (minutes per 100M rows).

LOCK TABLE timeout_center.timeouts IN ACCESS EXCLUSIVE MODE;
LOCK TABLE timeout_center.kinds IN SHARE ROW EXCLUSIVE MODE;

-- The enum, one label per kind, in the order of their names.
DO $$
BEGIN
  EXECUTE format('CREATE TYPE timeout_center.kind AS ENUM (%s)',
                 (SELECT coalesce(string_agg(quote_literal(k.kind), ', ' ORDER BY k.kind), '') FROM timeout_center.kinds k));
END $$;
COMMENT ON TYPE timeout_center.kind IS 'the kinds of timeout_center.kinds, 4 bytes per timeout; reads and writes as the kind''s name';

-- A text or varchar value (a typed parameter, a text column) is taken by INSERT and UPDATE.
CREATE CAST (text AS timeout_center.kind) WITH INOUT AS ASSIGNMENT;
CREATE CAST (varchar AS timeout_center.kind) WITH INOUT AS ASSIGNMENT;

-- The kinds rows keep the labels: a new kind adds its label (in name order), a renamed one renames
-- its label (the timeouts follow, as ON UPDATE CASCADE did), a kind whose timeouts remain cannot
-- be deleted (as ON DELETE RESTRICT did; final rows too, until retention purges them).
CREATE FUNCTION timeout_center.kinds_keep_labels() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  labels  text[] := (SELECT array_agg(e.enumlabel::text) FROM pg_enum e WHERE e.enumtypid = 'timeout_center.kind'::regtype);
  after   text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.kind = ANY (labels) AND EXISTS (SELECT 1 FROM timeout_center.timeouts t WHERE t.kind = OLD.kind::timeout_center.kind) THEN
      RAISE EXCEPTION 'update or delete on table "kinds" violates foreign key constraint "timeouts_kind_fkey" on table "timeouts"'
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'timeouts_kind_fkey',
              DETAIL = format('Key (kind)=(%s) is still referenced from table "timeouts".', OLD.kind);
    END IF;
    RETURN OLD;
  END IF;
  IF NEW.kind = ANY (labels) THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.kind = ANY (labels) THEN
    EXECUTE format('ALTER TYPE timeout_center.kind RENAME VALUE %L TO %L', OLD.kind, NEW.kind);
    RETURN NEW;
  END IF;
  SELECT min(l) INTO after FROM unnest(labels) AS l WHERE l > NEW.kind;
  IF after IS NULL THEN
    EXECUTE format('ALTER TYPE timeout_center.kind ADD VALUE IF NOT EXISTS %L', NEW.kind);
  ELSE
    EXECUTE format('ALTER TYPE timeout_center.kind ADD VALUE IF NOT EXISTS %L BEFORE %L', NEW.kind, after);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER kinds_keep_labels
  BEFORE INSERT OR UPDATE OF kind OR DELETE ON timeout_center.kinds
  FOR EACH ROW EXECUTE FUNCTION timeout_center.kinds_keep_labels();

-- The new table: the same columns, types (kind aside), defaults and checks as before.
CREATE TABLE timeout_center.timeouts_0017 (
  id            bigint GENERATED ALWAYS AS IDENTITY,
  due_at        timestamptz NOT NULL,
  -- When the row may be claimed: due_at, or later while it backs off after a failed attempt.
  -- Kept equal to due_at by trigger on insert and on any change of due_at.
  available_at  timestamptz NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  shard_id      bigint,
  finished_at   timestamptz,
  attempts      integer NOT NULL DEFAULT 0,
  kind          timeout_center.kind NOT NULL,
  state         text NOT NULL DEFAULT 'pending',
  biz_id        text NOT NULL,
  payload       jsonb,
  -- 'applied' (the handler changed the object) or 'skipped' (nothing to change, e.g. already paid).
  result        text,
  last_error    text,
  CONSTRAINT timeouts_biz_id_check CHECK (length(biz_id) BETWEEN 1 AND 200),
  CONSTRAINT timeouts_result_check CHECK (result IN ('applied', 'skipped')),
  CONSTRAINT timeouts_state_check CHECK (state IN ('pending', 'dispatched', 'done', 'cancelled', 'failed'))
);

INSERT INTO timeout_center.timeouts_0017 (id, due_at, available_at, created_at, shard_id, finished_at, attempts, kind, state,
                                          biz_id, payload, result, last_error)
OVERRIDING SYSTEM VALUE
SELECT id, due_at, available_at, created_at, shard_id, finished_at, attempts, kind::timeout_center.kind, state,
       biz_id, payload, result, last_error
  FROM timeout_center.timeouts;

-- The identity goes on from where the old one was (done_timeouts keeps the ids of moved rows).
SELECT setval(pg_get_serial_sequence('timeout_center.timeouts_0017', 'id'), s.last_value, s.is_called)
  FROM timeout_center.timeouts_id_seq s;

DROP VIEW timeout_center.all_timeouts;
DROP VIEW timeout_center.backlog;
DROP VIEW timeout_center.failed_timeouts;
DROP TABLE timeout_center.timeouts;
ALTER TABLE timeout_center.timeouts_0017 RENAME TO timeouts;
ALTER SEQUENCE timeout_center.timeouts_0017_id_seq RENAME TO timeouts_id_seq;
ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_pkey PRIMARY KEY (id);

-- The indexes of 0001-0003, 0010 (same names and definitions; kind is 4 bytes in their entries).
CREATE UNIQUE INDEX timeouts_one_live_per_biz
  ON timeout_center.timeouts (kind, biz_id) WHERE state IN ('pending', 'dispatched');
CREATE INDEX timeouts_due_by_kind ON timeout_center.timeouts (kind, available_at) WHERE state = 'pending';
CREATE INDEX timeouts_in_flight ON timeout_center.timeouts (shard_id) WHERE state = 'dispatched';
CREATE INDEX timeouts_failed ON timeout_center.timeouts (kind, finished_at) WHERE state = 'failed';
CREATE INDEX timeouts_failed_by_shard ON timeout_center.timeouts (shard_id) WHERE state = 'failed';
CREATE INDEX timeouts_purgeable ON timeout_center.timeouts (finished_at) WHERE state IN ('done', 'cancelled');

-- The triggers of 0001, 0012 and 0014, on the new table.
CREATE TRIGGER timeouts_before_write BEFORE INSERT OR UPDATE OF due_at ON timeout_center.timeouts
  FOR EACH ROW EXECUTE FUNCTION timeout_center.timeouts_before_write();
CREATE TRIGGER timeouts_refuse_late_cancel BEFORE UPDATE OF state ON timeout_center.timeouts
  FOR EACH ROW WHEN (OLD.state = 'dispatched' AND NEW.state = 'cancelled')
  EXECUTE FUNCTION timeout_center.refuse_late_cancel();

-- 0014's check, with the kind compared as text (kind_stores.kind stays text).
CREATE OR REPLACE FUNCTION timeout_center.timeouts_in_their_store() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  here  text := (SELECT i.store FROM timeout_center.store_identity i);
  bad   record;
BEGIN
  IF here IS NULL AND NOT EXISTS (SELECT 1 FROM timeout_center.kind_stores) THEN
    RETURN NULL;
  END IF;
  SELECT n.kind, n.biz_id, w.wanted INTO bad
    FROM inserted n
    LEFT JOIN timeout_center.kind_stores s ON s.kind = n.kind::text
    CROSS JOIN LATERAL (SELECT timeout_center.route_target(s.route_by, s.databases, s.range_from, s.range_to, n.biz_id) AS wanted) w
   WHERE w.wanted IS DISTINCT FROM here OR w.wanted = '-unroutable'
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  ELSIF bad.wanted = '-unroutable' THEN
    RAISE EXCEPTION 'timeout_center.timeouts: the store rule of kind % cannot place biz_id %', bad.kind, bad.biz_id
      USING ERRCODE = 'check_violation', HINT = 'see the kind''s route in the config (modulo and range take integer ids)';
  ELSE
    RAISE EXCEPTION 'timeout_center.timeouts: the timeout of % % belongs in %, not in %', bad.kind, bad.biz_id,
      coalesce('store ' || bad.wanted, 'the center database'), coalesce('store ' || here, 'the center database')
      USING ERRCODE = 'check_violation',
            HINT = 'insert it in the database the kind''s route picks for the biz_id: SELECT timeout_center.store_of(kind, biz_id) names it (NULL: the center)';
  END IF;
END $$;
CREATE TRIGGER timeouts_in_their_store AFTER INSERT ON timeout_center.timeouts
  REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION timeout_center.timeouts_in_their_store();

-- A kind given as text, for comparing with timeouts.kind: the label, or NULL when no such kind
-- exists (kind = timeout_center.kind_or_null($1) then matches nothing, as a text column did, where
-- $1::timeout_center.kind would raise). Stable: an index scan evaluates it once.
CREATE FUNCTION timeout_center.kind_or_null(p_kind text) RETURNS timeout_center.kind
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT e FROM unnest(enum_range(NULL::timeout_center.kind)) AS e WHERE e::text = p_kind
$$;

-- store_of and target_of on a timeouts row's kind (SELECT timeout_center.store_of(kind, biz_id)
-- FROM timeout_center.timeouts ...); a literal or untyped kind still picks the text ones.
CREATE FUNCTION timeout_center.store_of(p_kind timeout_center.kind, p_biz_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT timeout_center.store_of(p_kind::text, p_biz_id) $$;
CREATE FUNCTION timeout_center.target_of(p_kind timeout_center.kind, p_biz_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT timeout_center.target_of(p_kind::text, p_biz_id) $$;

-- The views, as 0008 and 0010 left them (backlog joins kinds through a cast to the enum, so its
-- per-kind probes stay on timeouts_due_by_kind).
CREATE VIEW timeout_center.failed_timeouts AS
SELECT t.id AS timeout_id, t.kind, t.biz_id, t.due_at, t.attempts, t.last_error, t.shard_id, sh.scan_id,
       t.finished_at AS failed_at, t.payload
  FROM timeout_center.timeouts t
  LEFT JOIN timeout_center.shards sh ON sh.id = t.shard_id
 WHERE t.state = 'failed';

CREATE VIEW timeout_center.backlog AS
SELECT k.kind, p.pending_due, f.in_flight,
       least(p.oldest_due_at, f.oldest_due_at) AS oldest_due_at,
       now() - least(p.oldest_due_at, f.oldest_due_at) AS oldest_lag,
       k.paused
  FROM timeout_center.kinds k
 CROSS JOIN LATERAL (SELECT count(*) AS pending_due, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()) p
 CROSS JOIN LATERAL (SELECT count(*) AS in_flight, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'dispatched' AND t.shard_id IS NOT NULL) f
 WHERE p.pending_due > 0 OR f.in_flight > 0;

CREATE VIEW timeout_center.all_timeouts AS
SELECT t.id, t.kind::text AS kind, t.biz_id, t.due_at, t.payload, t.state, t.available_at, t.attempts, t.shard_id,
       t.result, t.last_error, t.created_at, t.finished_at
  FROM timeout_center.timeouts t
UNION ALL
SELECT d.id, d.kind, d.biz_id, d.due_at, d.payload, 'done', d.finished_at, d.attempts, d.shard_id,
       d.result, d.last_error, d.created_at, d.finished_at
  FROM timeout_center.done_timeouts d;

ANALYZE timeout_center.timeouts;
