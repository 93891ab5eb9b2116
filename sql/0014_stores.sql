-- 0014_stores: timeouts stored beside the orders they close (issue 27, docs/scale.md).
-- A kind with `store: beside` keeps its timeouts in the business database that its route picks for
-- the biz_id, not in the center's database: each such database is a *store* with this same schema
-- (`timeout-center migrate` installs it there), led and fenced on its own (its own
-- coordinator_lease), where claim, handler and completion are one statement in one transaction:
-- the same-database path, per store. The center database is the store of every other kind.

-- Which store this database is: one row in a store (written by `migrate`), none in the center.
CREATE TABLE timeout_center.store_identity (
  store     text PRIMARY KEY CHECK (store ~ '^[a-z][a-z0-9_]{0,62}$'),
  only_one  boolean NOT NULL DEFAULT true UNIQUE CHECK (only_one)
);

-- The store rule of each kind stored beside its orders, written from the config like kind_routes
-- (src/db/routes.ts), with the same columns and meaning: the store of a timeout is
-- route_target(rule, biz_id). Kept apart from kind_routes, whose kinds take the external path:
-- a kind stored beside its orders runs the same-database path in its store.
CREATE TABLE timeout_center.kind_stores (
  kind        text PRIMARY KEY REFERENCES timeout_center.kinds (kind) ON UPDATE CASCADE ON DELETE CASCADE,
  route_by    text NOT NULL CHECK (route_by IN ('database', 'modulo', 'hash', 'range')),
  databases   text[] NOT NULL CHECK (cardinality(databases) >= 1),
  range_from  bigint[],
  range_to    bigint[],
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (route_by <> 'range' OR (cardinality(range_from) = cardinality(databases) AND cardinality(range_to) = cardinality(databases)))
);

-- The store a timeout belongs in: NULL for the center database, a store name, or '-unroutable'
-- when the rule cannot place the biz_id. For services and operators too:
--   SELECT timeout_center.store_of('order.unpaid', '12345');
CREATE FUNCTION timeout_center.store_of(p_kind text, p_biz_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT timeout_center.route_target(s.route_by, s.databases, s.range_from, s.range_to, p_biz_id)
    FROM timeout_center.kind_stores s
   WHERE s.kind = p_kind
$$;

-- An insert into the wrong database is refused, naming the right one, and writes nothing: a
-- timeout no coordinator scans would never close. One check per statement over the rows it
-- inserted (a transition table), not per row: a center-only deployment (no store rule, no
-- identity) pays two probes of empty tables per INSERT statement.
CREATE FUNCTION timeout_center.timeouts_in_their_store() RETURNS trigger
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
    LEFT JOIN timeout_center.kind_stores s ON s.kind = n.kind
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

CREATE TRIGGER timeouts_in_their_store
  AFTER INSERT ON timeout_center.timeouts
  REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION timeout_center.timeouts_in_their_store();
