-- timeout_center.claim_in_bucket: the batch claim of one shard as a Citus distributed function, for
-- kinds whose SQL handler changes tables distributed on the bucket and colocated with timeouts
-- (docs/scale.md "Citus: what runs"). Applied by `timeout-center migrate` on a database with the
-- Citus layout, after sql/citus/layout.sql and again at every migrate (CREATE OR REPLACE: a
-- database keeps the current body). Called by src/worker/queries/citus/claim_colocated.sql.
--
-- Why a function: claim.sql moves each row with an INSERT in a CTE, and Citus routes no query with
-- an INSERT CTE to one node (12.1: "only SELECT, UPDATE, or DELETE common table expressions may be
-- router planned"); planned apart, every claimed row crosses the Citus coordinator several times
-- (intermediate results: the locked rows, the handler's input and output, the deleted rows, then
-- the INSERT pulled to the coordinator and copied back). Distributed on its bucket argument,
-- colocated with timeouts, with force_delegation (the call runs inside the shard's transaction),
-- Citus sends the one call to the worker node holding the bucket; the statements below run there
-- on local shards, and one row comes back. Citus checks that every statement inside stays on the
-- bucket's shards (force delegation refuses any other), so a handler on tables that are not
-- colocated fails here, and the worker then runs the kind in another form (sql-handler.ts).
--
-- The same steps as claim.sql's batch form, one statement each (keep in step with claim.sql):
--   pinned   the rows an earlier run of this shard pinned (pin.sql), locked; a re-run applies them
--   fresh    else up to the shard's limit of due pending rows of the kind, in due order, FOR UPDATE
--            SKIP LOCKED
--   handler  the kind's statement (its $1 the claimed business ids, typed as PostgreSQL inferred
--            them; its $2 the bucket), run as dynamic SQL under the handler's lock_timeout; returns
--            the ids it changed
--   move     each row leaves timeouts for done_timeouts with its result (applied, or skipped when
--            the handler did not change it), attempts + 1 and finished_at: clock_timestamp() read
--            once here, after the handler (claim.sql reads it the same way)
-- Returns one row in claim.sql's batch shape: the count, the skipped count, one lateness per
-- distinct due time with how many rows had it, and the instant the lateness was measured (the
-- statement's start on the worker node, epoch ms).
-- The handler text comes from the worker's configuration (as in claim.sql, where it is spliced
-- into the statement); the function runs with its caller's rights.
CREATE OR REPLACE FUNCTION timeout_center.claim_in_bucket(
  bucket smallint, shard_id bigint, kind timeout_center.kind, claim_limit integer, handler text, lock_timeout_ms integer)
RETURNS TABLE (n integer, skipped integer, ids bigint[], biz_ids text[], payloads jsonb[],
               lateness_ms integer[], lateness_n integer[], measured_ms double precision)
LANGUAGE plpgsql AS $fn$
DECLARE
  started timestamptz := statement_timestamp();
  claimed bigint[];
  claimed_biz text[];
  changed text[];
  lock_before text;
  finished timestamptz;
  d_id bigint[]; d_kind text[]; d_biz text[]; d_due timestamptz[]; d_payload jsonb[]; d_attempts integer[];
  d_error text[]; d_created timestamptz[];
BEGIN
  SELECT array_agg(p.id), array_agg(p.biz_id) INTO claimed, claimed_biz
    FROM (SELECT t.id, t.biz_id FROM timeout_center.timeouts t
           WHERE t.bucket = claim_in_bucket.bucket AND t.shard_id = claim_in_bucket.shard_id AND t.state = 'dispatched'
             FOR UPDATE) p;
  IF claimed IS NULL THEN
    SELECT array_agg(f.id), array_agg(f.biz_id) INTO claimed, claimed_biz
      FROM (SELECT t.id, t.biz_id FROM timeout_center.timeouts t
             WHERE t.bucket = claim_in_bucket.bucket AND t.kind = claim_in_bucket.kind AND t.state = 'pending' AND t.available_at <= started
             ORDER BY t.available_at
             LIMIT claim_limit
               FOR UPDATE SKIP LOCKED) f;
  END IF;
  -- the handler runs on an empty batch too: a worker's check at start (sql-handler.ts) calls this
  -- with a limit of 0, so that Citus proves the handler stays on the bucket's shards
  lock_before := current_setting('lock_timeout');
  PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
  EXECUTE format('WITH applied (v) AS (%s) SELECT coalesce(array_agg(v::text), ''{}'') FROM applied', handler)
     INTO changed USING coalesce(claimed_biz, '{}'), claim_in_bucket.bucket;
  PERFORM set_config('lock_timeout', lock_before, true);
  IF claimed IS NULL THEN
    RETURN QUERY SELECT 0, 0, NULL::bigint[], NULL::text[], NULL::jsonb[], '{}'::integer[], '{}'::integer[],
                        date_part('epoch', started) * 1000;
    RETURN;
  END IF;
  -- A DELETE whose rows feed the INSERT in one statement (claim.sql's taken and moved) is what
  -- Citus does not route; the deleted rows are held in arrays here, on the worker node, instead.
  WITH taken AS (
    DELETE FROM timeout_center.timeouts t
     WHERE t.bucket = claim_in_bucket.bucket AND t.id = ANY (claimed)
    RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at
  )
  SELECT array_agg(k.id), array_agg(k.kind::text), array_agg(k.biz_id), array_agg(k.due_at), array_agg(k.payload),
         array_agg(k.attempts), array_agg(k.last_error), array_agg(k.created_at)
    INTO d_id, d_kind, d_biz, d_due, d_payload, d_attempts, d_error, d_created
    FROM taken k;
  finished := clock_timestamp();
  -- applied: the row's business id among those the handler changed (IN a subquery: hashed, as
  -- claim.sql's; `= ANY (changed)` would compare each row with every changed id)
  INSERT INTO timeout_center.done_timeouts
         (bucket, id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT claim_in_bucket.bucket, u.id, u.kind, u.biz_id, u.due_at, u.payload, u.attempts + 1, claim_in_bucket.shard_id,
         CASE WHEN u.biz_id IN (SELECT c.v FROM unnest(changed) AS c (v) WHERE c.v IS NOT NULL) THEN 'applied' ELSE 'skipped' END,
         u.last_error, u.created_at, finished
    FROM unnest(d_id, d_kind, d_biz, d_due, d_payload, d_attempts, d_error, d_created)
         AS u (id, kind, biz_id, due_at, payload, attempts, last_error, created_at);
  RETURN QUERY
  SELECT coalesce(sum(g.n), 0)::integer,
         (SELECT count(*) FROM unnest(d_biz) AS u (biz_id)
           WHERE u.biz_id NOT IN (SELECT c.v FROM unnest(changed) AS c (v) WHERE c.v IS NOT NULL))::integer,
         NULL::bigint[], NULL::text[], NULL::jsonb[],
         coalesce(array_agg((date_part('epoch', started - g.due_at) * 1000)::integer), '{}'),
         coalesce(array_agg(g.n), '{}'),
         date_part('epoch', started) * 1000
    FROM (SELECT u.due_at, count(*)::integer AS n FROM unnest(d_due) AS u (due_at) GROUP BY u.due_at) g;
END
$fn$;
SELECT create_distributed_function('timeout_center.claim_in_bucket(smallint, bigint, timeout_center.kind, integer, text, integer)',
                                   'bucket', colocate_with := 'timeout_center.timeouts', force_delegation := true);
