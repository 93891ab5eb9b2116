-- plan_shards: the map step. Per kind, counts the due timeouts beyond what the shards already
-- queued or running will claim, and writes a new scan with shards for them, each with a claim
-- limit. It reads the timeouts and writes none of them: a worker claims its shard's rows itself,
-- in the shard's transaction (worker/queries/claim.sql), so a timeout is written once on its way
-- to done. Counting stops at the live capacity plus $4 rows, so a large backlog costs a bounded
-- read; what a count found but the room did not take is the coordinator's credit, passed back in
-- $7 for the next scans instead of counting the same rows again. The scan and all its shards are
-- written by this one statement, so the scan is mapped at once; a tick with nothing new writes
-- nothing. Runs inside the coordinator's fenced transaction.
--   $1 cutoff (timestamptz)   $2 kinds served (text[])   $3 max new shards
--   $4 max rows counted per kind beyond the live capacity   $5 epoch   $6 coordinator id
--   $7 credit: {"kind": uncovered rows counted earlier} (jsonb; a kind in it is not counted)
-- Shards carry a target (a business database name, or NULL): the map counts per (kind, target),
-- so one shard's handler runs against exactly one database (sql/0005_business_databases.sql).
-- Returns the new shards (id, scan_id, kind, target, claim_limit) with their (kind, target)'s
-- uncovered rows and whether they were counted now; none when nothing new was due.
WITH live_target AS (
  SELECT sh.kind, sh.target, sum(sh.claim_limit)::bigint AS capacity
    FROM timeout_center.shards sh
   WHERE sh.state IN ('queued', 'running')
   GROUP BY sh.kind, sh.target
), live AS (
  SELECT lt.kind, sum(lt.capacity)::bigint AS capacity FROM live_target lt GROUP BY lt.kind
), need AS MATERIALIZED (
  -- Counted once per kind (unless the credit says), on timeouts_due_by_kind in due order (the
  -- order workers claim in), stopping at what is already covered plus $4. A kind whose handler
  -- runs in one business database gets that database as its shards' target.
  SELECT k.kind, r.databases[1] AS target, k.shard_size, cr.credit IS NULL AS counted,
         coalesce(cr.credit,
                  greatest((SELECT count(*)
                              FROM (SELECT 1 FROM timeout_center.timeouts t
                                     WHERE t.kind = k.kind AND t.state = 'pending' AND t.available_at <= $1
                                     ORDER BY t.available_at
                                     LIMIT coalesce(l.capacity, 0) + $4) d)
                           - coalesce(l.capacity, 0), 0)) AS uncovered
    FROM timeout_center.kinds k
    LEFT JOIN live l ON l.kind = k.kind
    LEFT JOIN timeout_center.kind_routes r ON r.kind = k.kind
   CROSS JOIN LATERAL (SELECT ($7::jsonb ->> k.kind)::bigint AS credit) cr
   WHERE k.kind = ANY ($2::text[]) AND (r.kind IS NULL OR r.route_by = 'database')
  UNION ALL
  -- A kind routed over several business databases: its due rows (the same window in due order)
  -- counted per target with the routing rule in SQL (timeout_center.route_target, the predicate
  -- the external claim filters by), less what that target's shards in flight cover. Always
  -- counted (the credit is per kind).
  SELECT k.kind, c.target, k.shard_size, true, greatest(c.n - coalesce(lt.capacity, 0), 0)
    FROM timeout_center.kinds k
    JOIN timeout_center.kind_routes r ON r.kind = k.kind AND r.route_by <> 'database'
    LEFT JOIN live l ON l.kind = k.kind
   CROSS JOIN LATERAL (SELECT d.target, count(*) AS n
                         FROM (SELECT timeout_center.route_target(r.route_by, r.databases, r.range_from, r.range_to, t.biz_id) AS target
                                 FROM timeout_center.timeouts t
                                WHERE t.kind = k.kind AND t.state = 'pending' AND t.available_at <= $1
                                ORDER BY t.available_at
                                LIMIT coalesce(l.capacity, 0) + $4) d
                        GROUP BY d.target) c
    LEFT JOIN live_target lt ON lt.kind = k.kind AND lt.target = c.target
   WHERE k.kind = ANY ($2::text[])
), planned AS (
  -- Kinds take turns (every kind's first shard, then every kind's second, ...) so that one
  -- kind's flood does not take all the room.
  SELECT n.kind, n.target, g.i AS turn, least(n.shard_size::bigint, n.uncovered - (g.i - 1) * n.shard_size)::int AS claim_limit
    FROM need n, generate_series(1, ceil(n.uncovered::numeric / n.shard_size)::int) AS g (i)
   WHERE n.uncovered > 0
   ORDER BY g.i, n.kind, n.target
   LIMIT $3
), new_scan AS (
  INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, shard_count, mapped_at)
  SELECT $5, $6, $1, 'mapped', (SELECT count(*) FROM planned), now()
   WHERE EXISTS (SELECT 1 FROM planned)
  RETURNING id
), new_shards AS (
  INSERT INTO timeout_center.shards (scan_id, kind, target, seq, size, claim_limit, published_at, publish_count)
  SELECT (SELECT id FROM new_scan), p.kind, p.target, row_number() OVER (ORDER BY p.turn, p.kind, p.target) - 1, 0, p.claim_limit, now(), 1
    FROM planned p
  RETURNING id, scan_id, kind, target, claim_limit
)
SELECT s.id, s.scan_id, s.kind, s.target, s.claim_limit, n.uncovered, n.counted
  FROM new_shards s JOIN need n ON n.kind = s.kind AND n.target IS NOT DISTINCT FROM s.target
 ORDER BY s.id
