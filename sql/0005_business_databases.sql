-- 0005_business_databases: the external path, for handlers that run outside the center's database
-- (a business database it does not own, chosen per biz_id by a routing rule; an HTTP service; a
-- code handler). Such a shard targets exactly one place: its timeouts are claimed and committed
-- first (pending -> dispatched, the second write per timeout, only on this path), applied there,
-- then recorded here. See docs/architecture.md, "The external path".

-- Which business database a shard's handler runs against (businessDatabases name in the config);
-- NULL for the same-database path and for HTTP and code handlers without a database.
ALTER TABLE timeout_center.shards ADD COLUMN target text;

-- The routing rule of each kind whose SQL handler runs in business databases, written from the
-- config like timeout_center.kinds. route_by 'database': all of the kind's timeouts go to
-- databases[1]; 'modulo': numeric biz_id, databases[1 + biz_id mod n]; 'hash': any biz_id,
-- databases[1 + hashtextextended(biz_id, 0) mod n]; 'range': numeric biz_id, the i-th database
-- when range_from[i] <= biz_id < range_to[i]. A kind without a row here has no target.
CREATE TABLE timeout_center.kind_routes (
  kind        text PRIMARY KEY REFERENCES timeout_center.kinds (kind) ON UPDATE CASCADE ON DELETE CASCADE,
  route_by    text NOT NULL CHECK (route_by IN ('database', 'modulo', 'hash', 'range')),
  databases   text[] NOT NULL CHECK (cardinality(databases) >= 1),
  range_from  numeric[],
  range_to    numeric[],
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (route_by <> 'range' OR (cardinality(range_from) = cardinality(databases) AND cardinality(range_to) = cardinality(databases)))
);

-- The target of one timeout: the routing rule in SQL, so that the map (plan_shards.sql) and the
-- external claim (external_claim.sql) agree on it row by row. A biz_id the rule cannot place (not
-- an integer under modulo or range, or outside every range) gets '-unroutable' (no database
-- name starts with '-'): its shard fails those timeouts with an error that says why. The
-- modulo and hash remainders are made non-negative. hashtextextended(text, 0) is the hash
-- PostgreSQL's hash partitioning stores partitions by, so it is stable across versions; a service
-- that wants to know where an id goes runs SELECT timeout_center.target_of(kind, biz_id).
CREATE FUNCTION timeout_center.target_of(p_kind text, p_biz_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE
           WHEN r.route_by = 'database' THEN r.databases[1]
           WHEN r.route_by = 'hash'
             THEN r.databases[1 + ((hashtextextended(p_biz_id, 0) % cardinality(r.databases)) + cardinality(r.databases)) % cardinality(r.databases)]
           WHEN p_biz_id !~ '^-?[0-9]{1,38}$' THEN '-unroutable'
           WHEN r.route_by = 'modulo'
             THEN r.databases[1 + (((p_biz_id::numeric % cardinality(r.databases)) + cardinality(r.databases)) % cardinality(r.databases))::int]
           ELSE coalesce((SELECT x.db FROM unnest(r.range_from, r.range_to, r.databases) AS x (f, t, db)
                           WHERE p_biz_id::numeric >= x.f AND p_biz_id::numeric < x.t LIMIT 1), '-unroutable')
         END
    FROM timeout_center.kind_routes r
   WHERE r.kind = p_kind
$$;

-- The marker table of the external path, here for code handlers that run in the center's own
-- database; each business database gets the same table from `timeout-center migrate`
-- (worker/queries/business_markers.sql). A run writes its marker in the same transaction as the
-- handler's effect, so a re-run after a crash between that commit and the center's knows what the
-- first run did.
CREATE TABLE timeout_center.markers (
  shard_id          bigint PRIMARY KEY,
  lease_token       uuid NOT NULL,
  applied           text[] NOT NULL,
  failed_ids        text[] NOT NULL DEFAULT '{}',
  failed_errors     text[] NOT NULL DEFAULT '{}',
  failed_permanent  boolean[] NOT NULL DEFAULT '{}',
  created_at        timestamptz NOT NULL DEFAULT now()
);

-- Circuit breakers of the external path, one per kind, target and worker, as each worker last
-- saw it (closed, open, half_open). `timeout-center status` shows those not closed.
CREATE TABLE timeout_center.circuit_breakers (
  kind        text NOT NULL,
  target      text NOT NULL,
  worker      text NOT NULL,
  state       text NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
  last_error  text,
  changed_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (kind, target, worker)
);

CREATE OR REPLACE VIEW timeout_center.shard_report AS
SELECT sh.id AS shard_id, sh.scan_id, sh.kind, sh.size, sh.state, sh.attempts, sh.owner,
       sh.lease_expires_at, sh.done_count AS done, sh.skipped_count AS skipped,
       sh.failed_count AS failed, sh.retried_count AS retried, sh.error_sample,
       sh.created_at, sh.started_at, sh.finished_at,
       sh.finished_at - sh.started_at AS duration, sh.publish_count, sh.claim_limit, sh.target
  FROM timeout_center.shards sh;
