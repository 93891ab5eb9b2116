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
-- databases[1]; 'modulo': integer biz_id, databases[1 + biz_id mod n]; 'hash': any biz_id,
-- databases[1 + hashtextextended(biz_id, 0) mod n]; 'range': integer biz_id, the i-th database
-- when range_from[i] <= biz_id < range_to[i]. A kind without a row here has no target.
CREATE TABLE timeout_center.kind_routes (
  kind        text PRIMARY KEY REFERENCES timeout_center.kinds (kind) ON UPDATE CASCADE ON DELETE CASCADE,
  route_by    text NOT NULL CHECK (route_by IN ('database', 'modulo', 'hash', 'range')),
  databases   text[] NOT NULL CHECK (cardinality(databases) >= 1),
  range_from  bigint[],
  range_to    bigint[],
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (route_by <> 'range' OR (cardinality(range_from) = cardinality(databases) AND cardinality(range_to) = cardinality(databases)))
);

-- The target of one timeout: the routing rule in SQL, so that the map (plan_shards.sql) and the
-- external claim (external_claim.sql) agree on it row by row. A biz_id the rule cannot place (not
-- an integer under modulo or range, or outside every range) gets '-unroutable' (no database
-- name starts with '-'; modulo and range take integer ids of up to 18 digits, the bigint range):
-- its shard fails those timeouts with an error that says why. The
-- modulo and hash remainders are made non-negative. hashtextextended(text, 0) is the hash
-- PostgreSQL's hash partitioning stores partitions by, so it is stable across versions. Ranges
-- are stored sorted by range_from (src/db/routes.ts) for width_bucket.
-- route_target takes the rule's columns, so that it is one expression PostgreSQL inlines into the
-- statements that scan timeouts (no function call per row); target_of looks the rule up by kind,
-- for services and operators: SELECT timeout_center.target_of('order.unpaid', '12345').
CREATE FUNCTION timeout_center.route_target(p_by text, p_databases text[], p_from bigint[], p_to bigint[], p_biz_id text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
           WHEN p_by IS NULL THEN NULL
           WHEN p_by = 'database' THEN p_databases[1]
           WHEN p_by = 'hash'
             THEN p_databases[1 + ((hashtextextended(p_biz_id, 0) % cardinality(p_databases)) + cardinality(p_databases)) % cardinality(p_databases)]
           -- (an unbounded pattern and a length test: a bounded {1,18} costs several times more per row)
           WHEN p_biz_id !~ '^-?[0-9]+$' OR length(p_biz_id) > 18 + (left(p_biz_id, 1) = '-')::int THEN '-unroutable'
           WHEN p_by = 'modulo'
             THEN p_databases[1 + (((p_biz_id::bigint % cardinality(p_databases)) + cardinality(p_databases)) % cardinality(p_databases))::int]
           ELSE coalesce(CASE WHEN p_biz_id::bigint < p_to[width_bucket(p_biz_id::bigint, p_from)]
                              THEN p_databases[width_bucket(p_biz_id::bigint, p_from)] END, '-unroutable')
         END
$$;

CREATE FUNCTION timeout_center.target_of(p_kind text, p_biz_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT timeout_center.route_target(r.route_by, r.databases, r.range_from, r.range_to, p_biz_id)
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
