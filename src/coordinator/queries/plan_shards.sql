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
-- Returns the new shards (id, scan_id, kind, claim_limit) with their kind's uncovered rows and
-- whether they were counted now; none when nothing new was due.
WITH live AS (
  SELECT sh.kind, sum(sh.claim_limit)::bigint AS capacity
    FROM timeout_center.shards sh
   WHERE sh.state IN ('queued', 'running')
   GROUP BY sh.kind
), need AS MATERIALIZED (
  -- Counted once per kind (unless the credit says), on timeouts_due_by_kind in due order (the
  -- order workers claim in), stopping at what is already covered plus $4.
  SELECT k.kind, k.shard_size, cr.credit IS NULL AS counted,
         coalesce(cr.credit,
                  greatest((SELECT count(*)
                              FROM (SELECT 1 FROM timeout_center.timeouts t
                                     WHERE t.kind = k.kind AND t.state = 'pending' AND t.available_at <= $1
                                     ORDER BY t.available_at
                                     LIMIT coalesce(l.capacity, 0) + $4) d)
                           - coalesce(l.capacity, 0), 0)) AS uncovered
    FROM timeout_center.kinds k
    LEFT JOIN live l ON l.kind = k.kind
   CROSS JOIN LATERAL (SELECT ($7::jsonb ->> k.kind)::bigint AS credit) cr
   WHERE k.kind = ANY ($2::text[])
), sized AS (
  -- Adaptive shard size (issue 11): the kind's shard_size when few are due (a shard starts as soon
  -- as its rows are due, lateness stays low), larger in a flood so that per-shard overheads (lease,
  -- lock, finish, the stream round trip) are paid per thousands of rows: the uncovered rows in
  -- about 8 shards (enough to keep a few workers busy, twice over), never above 20,000 rows, which
  -- bounds how long a shard holds its row locks (a cancel waits for it) to well under a second.
  -- SQL handlers only: a code or HTTP handler gets shard_size rows per call, as configured (one
  -- request per shard). A shard_size configured above 20,000 is kept as is.
  -- When nothing of the kind is in flight (a flood begins), its first shard keeps shard_size, so
  -- the first closes commit one small shard after the due instant rather than one large one.
  SELECT z.kind, z.uncovered, z.size,
         CASE WHEN EXISTS (SELECT 1 FROM live l WHERE l.kind = z.kind) THEN z.size ELSE least(z.size, z.shard_size) END AS first
    FROM (SELECT n.kind, n.uncovered, n.shard_size::bigint AS shard_size,
                 CASE WHEN (SELECT k.handler_type FROM timeout_center.kinds k WHERE k.kind = n.kind) = 'sql'
                      THEN greatest(n.shard_size::bigint, least(20000, ceil(n.uncovered / 8.0)::bigint))
                      ELSE n.shard_size::bigint END AS size
            FROM need n
           WHERE n.uncovered > 0) z
), planned AS (
  -- Kinds take turns (every kind's first shard, then every kind's second, ...) so that one
  -- kind's flood does not take all the room. Shard 1 takes `first` rows, the others `size`.
  SELECT n.kind, g.i AS turn,
         (CASE WHEN g.i = 1 THEN least(n.first, n.uncovered)
               ELSE least(n.size, n.uncovered - n.first - (g.i - 2) * n.size) END)::int AS claim_limit
    FROM sized n, generate_series(1, 1 + ceil(greatest(n.uncovered - n.first, 0)::numeric / n.size)::int) AS g (i)
   ORDER BY g.i, n.kind
   LIMIT $3
), new_scan AS (
  INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, shard_count, mapped_at)
  SELECT $5, $6, $1, 'mapped', (SELECT count(*) FROM planned), now()
   WHERE EXISTS (SELECT 1 FROM planned)
  RETURNING id
), new_shards AS (
  INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, published_at, publish_count)
  SELECT (SELECT id FROM new_scan), p.kind, row_number() OVER (ORDER BY p.turn, p.kind) - 1, 0, p.claim_limit, now(), 1
    FROM planned p
  RETURNING id, scan_id, kind, claim_limit
)
SELECT s.id, s.scan_id, s.kind, s.claim_limit, n.uncovered, n.counted
  FROM new_shards s JOIN need n ON n.kind = s.kind
 ORDER BY s.id
