-- The Citus layout (docs/scale.md "Citus: the layout"), applied by `timeout-center migrate` after
-- the numbered migrations when the database has the citus extension (src/db/citus-layout.ts), once.
-- Not a numbered migration: the numbered ones run on every PostgreSQL, this only where Citus is;
-- on plain PostgreSQL nothing of it exists (no bucket column, the same statements).
-- :buckets is replaced by the bucket count (= the Citus shard count of timeouts).
-- timeouts and done_timeouts gain a bucket (smallint, a hash of biz_id chosen so that each bucket
-- value lands in its own Citus shard) and are distributed on it, colocated; the control plane and
-- the small configuration tables stay plain tables on the Citus coordinator (no statement routed
-- to a worker node reads them). Existing rows are kept: held aside, then put back with their bucket.
SET LOCAL citus.enable_unsafe_triggers = on;
-- sequential: the function below is created on every node in this same transaction
SET LOCAL citus.multi_shard_modify_mode = 'sequential';
CREATE TABLE timeout_center.layout (
  name text PRIMARY KEY CHECK (name = 'citus'),
  buckets smallint[] NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TEMP TABLE layout_held_timeouts ON COMMIT DROP AS SELECT * FROM timeout_center.timeouts;
CREATE TEMP TABLE layout_held_done ON COMMIT DROP AS SELECT * FROM timeout_center.done_timeouts;
DELETE FROM timeout_center.timeouts;
DELETE FROM timeout_center.done_timeouts;
-- An insert into the wrong store is refused by a statement trigger over its transition table
-- (sql/0014); Citus runs no statement-level trigger with transition tables on a distributed table,
-- and a Citus database is a dedicated timeout database (the center), not a store beside orders.
DROP TRIGGER timeouts_in_their_store ON timeout_center.timeouts;
-- A cancel or reschedule of a timeout an external shard holds is refused by a row trigger that reads
-- timeout_center.shards (sql/0020); shards live on the coordinator only, so the trigger cannot run
-- on a worker node. On Citus the external claim holds no row pending: it writes its rows
-- dispatched, which a cancel or reschedule never changes (src/worker/queries/citus/external_claim.sql).
DROP TRIGGER timeouts_refuse_held_change ON timeout_center.timeouts;
ALTER TABLE timeout_center.timeouts ADD COLUMN bucket smallint NOT NULL;
ALTER TABLE timeout_center.timeouts DROP CONSTRAINT timeouts_pkey, ADD CONSTRAINT timeouts_pkey PRIMARY KEY (id, bucket);
DROP INDEX timeout_center.timeouts_one_live_per_biz;
CREATE UNIQUE INDEX timeouts_one_live_per_biz ON timeout_center.timeouts (kind, biz_id, bucket) WHERE state IN ('pending', 'dispatched');
ALTER TABLE timeout_center.done_timeouts ADD COLUMN bucket smallint NOT NULL;
ALTER TABLE timeout_center.done_timeouts DROP CONSTRAINT done_timeouts_pkey, ADD CONSTRAINT done_timeouts_pkey PRIMARY KEY (id, bucket);
-- A unit of work claims from one bucket: the map plans per (kind, bucket), and the shard row
-- carries its bucket to the worker (every statement that locks timeouts rows names it).
ALTER TABLE timeout_center.shards ADD COLUMN bucket smallint;
SELECT create_distributed_table('timeout_center.timeouts', 'bucket', shard_count => :buckets);
SELECT create_distributed_table('timeout_center.done_timeouts', 'bucket', colocate_with => 'timeout_center.timeouts');
-- One bucket value per Citus shard: for each shard in hash order, the smallest smallint Citus
-- places in it.
INSERT INTO timeout_center.layout (name, buckets)
SELECT 'citus', array_agg(v ORDER BY s.shardminvalue::bigint)
  FROM pg_dist_shard s
 CROSS JOIN LATERAL (SELECT min(c)::smallint AS v FROM generate_series(0, 32767) c
                      WHERE get_shard_id_for_distribution_column('timeout_center.timeouts', c::smallint) = s.shardid) b
 WHERE s.logicalrelid = 'timeout_center.timeouts'::regclass;
-- timeout_center.bucket_of(biz_id): the bucket of an object, the same hash route_target uses
-- (hashtextextended), into one of the chosen values; IMMUTABLE, so Citus folds it on the
-- coordinator and routes an INSERT or UPDATE that names it.
DO $$
DECLARE b smallint[] := (SELECT buckets FROM timeout_center.layout);
BEGIN
  EXECUTE format($f$CREATE FUNCTION timeout_center.bucket_of(biz_id text) RETURNS smallint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (%L::smallint[])[1 + (hashtextextended(biz_id, 0) %% %s + %s) %% %s]$f$,
    b, cardinality(b), cardinality(b), cardinality(b));
END $$;
INSERT INTO timeout_center.timeouts OVERRIDING SYSTEM VALUE SELECT *, timeout_center.bucket_of(biz_id) FROM layout_held_timeouts;
INSERT INTO timeout_center.done_timeouts SELECT *, timeout_center.bucket_of(biz_id) FROM layout_held_done;
-- The backlog view (sql/0008) probes per kind with a LATERAL correlated on kind, which Citus does
-- not run over a distributed table: the same columns from one grouped multi-shard read.
CREATE OR REPLACE VIEW timeout_center.backlog AS
SELECT k.kind, coalesce(p.pending_due, 0) AS pending_due, coalesce(p.in_flight, 0) AS in_flight,
       LEAST(p.oldest_pending, p.oldest_in_flight) AS oldest_due_at,
       now() - LEAST(p.oldest_pending, p.oldest_in_flight) AS oldest_lag, k.paused
  FROM timeout_center.kinds k
  JOIN (SELECT t.kind::text AS kind,
               count(*) FILTER (WHERE t.state = 'pending' AND t.available_at <= now()) AS pending_due,
               min(t.due_at) FILTER (WHERE t.state = 'pending' AND t.available_at <= now()) AS oldest_pending,
               count(*) FILTER (WHERE t.state = 'dispatched' AND t.shard_id IS NOT NULL) AS in_flight,
               min(t.due_at) FILTER (WHERE t.state = 'dispatched' AND t.shard_id IS NOT NULL) AS oldest_in_flight
          FROM timeout_center.timeouts t
         WHERE (t.state = 'pending' AND t.available_at <= now()) OR (t.state = 'dispatched' AND t.shard_id IS NOT NULL)
         GROUP BY t.kind) p ON p.kind = k.kind
 WHERE p.pending_due > 0 OR p.in_flight > 0;
