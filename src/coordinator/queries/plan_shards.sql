-- plan_shards: the map step. Per kind, counts the due timeouts beyond what the shards already
-- queued or running will claim, and writes a new scan with shards for them, each with a claim
-- limit. It reads the timeouts and writes none of them: a worker claims its shard's rows itself,
-- in the shard's transaction (worker/queries/claim.sql), so a timeout is written once on its way
-- to done. Counting stops at the live capacity plus $4 rows, so a large backlog costs a bounded
-- read; what a count found but the room did not take is the coordinator's credit, passed back in
-- $7 for the next scans instead of counting the same rows again (as is a flood counted before
-- its due instant: count_ahead.sql). The scan and all its shards are written by this one
-- statement, so the scan is mapped at once; a tick with nothing new writes nothing. Runs inside
-- the coordinator's fenced transaction.
--   $1 cutoff (timestamptz)   $2 kinds served (text[])   $3 max new shards
--   $4 max rows counted per kind beyond the live capacity   $5 epoch   $6 coordinator id
--   $7 credit: {"kind": [uncovered rows counted earlier, whether that count saw the last due
--      row]} (jsonb; a kind in it is not counted)
--   $8 rate budget: {"kind": timeouts the coordinator's token bucket allows now} (jsonb; a
--      rate-limited kind missing from it gets nothing this time: see the flow CTE)
--   $9 target rate budget: {"target": timeouts the token bucket of that business database allows
--      now} (jsonb; a rate-limited target missing from it gets nothing: see target_flow)
--   $10 not before (timestamptz, or NULL): a plan written ahead of its rows' due instant, from a
--      count ahead (sql/0011); workers claim no earlier than it
--   $11 gone after (ms): a shard running under a worker gone this long (no heartbeat, or
--      stopped: timeout_center.worker_gone, sql/0018) covers nothing; the reaper hands it on
--   $12 claim floors: {"kind": [available_at, id]} (jsonb, next_due.sql; a kind missing: from the
--      start): the counts seek the due index from the kind's floor, and each new shard carries its
--      kind's floor (shards.claim_floor and claim_floor_id, sql/0030 and 0041), which its claim
--      seeks from
--   $13 the oldest shard id in flight (next_due.sql's in_flight_from): the shards in flight are
--      read from it (sql/0042)
-- @params cutoff: Date, kinds: string[], maxShards: number, maxRows: number, epoch: number, coordinatorId: string,
-- @params credit: string, rateBudget: string, targetBudget: string, notBefore: Date | null, goneAfterMs: number,
-- @params floors: string, shardsFrom: number
-- Shards carry a target (a business database name, or NULL): the map counts per (kind, target),
-- so one shard's handler runs against exactly one database (sql/0005_business_databases.sql).
-- Flow control (pause, cap, rate) is per kind, over all of its targets; and a rate limit per
-- business database (target, sql/0009), over all kinds whose shards target it: marked
-- "[per target]" below (CTE target_flow, the need filter, the shard size in candidates, and the
-- kind_allowed -> target_ranked -> planned steps). Same-database shards (target NULL) have none.
-- Returns the new shards (id, scan_id, kind, target, claim_limit) with their (kind, target)'s
-- uncovered rows, whether they were counted now, and whether that count saw the last due row
-- (complete); none when nothing new was due.
WITH live_target AS (
  -- The capacity in flight: shards queued or running, but not one running under a gone worker
  -- (its rows are due now, and it claims nothing until the reaper hands it on).
  SELECT sh.kind, sh.target, sum(sh.claim_limit)::bigint AS capacity, count(*)::int AS shards
    FROM timeout_center.shards sh
   WHERE sh.state IN ('queued', 'running') AND sh.id >= $13
     AND NOT (sh.state = 'running' AND timeout_center.worker_gone(sh.owner, $11))
   GROUP BY sh.kind, sh.target
), live AS (
  SELECT lt.kind, sum(lt.capacity)::bigint AS capacity, sum(lt.shards)::int AS shards FROM live_target lt GROUP BY lt.kind
), flow AS (
  -- Flow control per kind (sql/0006; docs/operations.md "Flow control"), read here so that a
  -- change applies at the next plan. shard_room: new shards the kind may get (none while paused;
  -- one waiting at most while no live worker serves it;
  -- under a cap, the cap minus its shards queued or running; NULL: unbounded). row_room: rows it
  -- may get under a rate limit: the token bucket's budget ($8), and never more than one second's
  -- worth in flight, so a lowered limit applies within a second (NULL: unbounded). A
  -- rate-limited kind's shards hold a tenth of a second's worth, so its commits come smoothly.
  SELECT k.kind,
         CASE WHEN k.paused THEN 0
              -- no live worker serves the kind (sql/0013): one shard waiting at most
              WHEN NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE k.kind = ANY (w.kinds))
                THEN greatest(1 - coalesce(l.shards, 0), 0)
              WHEN k.max_running_shards IS NOT NULL THEN greatest(k.max_running_shards - coalesce(l.shards, 0), 0)
         END AS shard_room,
         CASE WHEN k.rate_limit IS NOT NULL
              THEN greatest(least(coalesce(($8::jsonb ->> k.kind)::bigint, 0), ceil(k.rate_limit)::bigint - coalesce(l.capacity, 0)), 0)
         END AS row_room,
         CASE WHEN k.rate_limit IS NOT NULL THEN least(k.shard_size, greatest(ceil(k.rate_limit * 0.1), 1)::int)
              ELSE k.shard_size END AS shard_size
    FROM timeout_center.kinds k
    LEFT JOIN live l ON l.kind = k.kind
   WHERE k.kind = ANY ($2::text[])
), target_flow AS (
  -- [per target] A rate-limited business database (sql/0009): row_room is what it may get now,
  -- over all kinds: its token bucket's budget ($9), and never more than one second's worth in
  -- flight against it (the claim limits of its shards queued or running, whatever their kind;
  -- queued shards of a paused kind are left out: they wait for the resume, and must not take
  -- the room of the kinds an operator paused that one for). Its shards hold a tenth of a second's
  -- worth (and never more than their kind's shard size), so the commits come smoothly.
  SELECT tg.target,
         greatest(least(coalesce(($9::jsonb ->> tg.target)::bigint, 0), ceil(tg.rate_limit)::bigint - coalesce(tl.capacity, 0)), 0) AS row_room,
         greatest(ceil(tg.rate_limit * 0.1), 1)::int AS shard_size
    FROM timeout_center.targets tg
    LEFT JOIN LATERAL (SELECT sum(sh.claim_limit)::bigint AS capacity
                         FROM timeout_center.shards sh
                        WHERE sh.target = tg.target AND sh.state IN ('queued', 'running') AND sh.id >= $13
                          AND NOT (sh.state = 'queued' AND EXISTS (SELECT 1 FROM timeout_center.kinds kc WHERE kc.kind = sh.kind AND kc.paused))) tl ON true
   WHERE tg.rate_limit IS NOT NULL
), need AS MATERIALIZED (
  -- Counted once per kind (unless the credit says), on timeouts_due_by_key in due order (the
  -- order workers claim in; pending_count, sql/0053: that order whatever the row estimate),
  -- stopping at what is already covered plus $4. A kind flow control holds back now is not
  -- counted. A kind whose handler runs in one business database gets that database as its
  -- shards' target.
  SELECT f.kind, r.databases[1] AS target, f.shard_size, f.shard_room, f.row_room, cr.credit IS NULL AS counted,
         coalesce(cr.credit, greatest(cnt.n - coalesce(l.capacity, 0), 0)) AS uncovered,
         -- complete: the count (now, or the credit's) stopped short of its bound, so it saw the
         -- last due row
         coalesce(cnt.n < coalesce(l.capacity, 0) + $4, cr.complete, false) AS complete
    FROM flow f
    LEFT JOIN live l ON l.kind = f.kind
    LEFT JOIN timeout_center.kind_routes r ON r.kind = f.kind
   CROSS JOIN LATERAL (SELECT ($7::jsonb -> f.kind ->> 0)::bigint AS credit, ($7::jsonb -> f.kind ->> 1)::boolean AS complete) cr
   CROSS JOIN LATERAL (SELECT CASE WHEN cr.credit IS NULL THEN
                                timeout_center.pending_count(f.kind::timeout_center.kind,
                                                             coalesce(($12::jsonb -> f.kind ->> 0)::timestamptz, '-infinity'),
                                                             coalesce(($12::jsonb -> f.kind ->> 1)::bigint, 0),
                                                             $1, coalesce(l.capacity, 0) + $4)
                              END AS n
                       OFFSET 0) cnt -- evaluated once: pulled up, the count ran for each use of n
   WHERE coalesce(f.shard_room, 1) > 0 AND coalesce(f.row_room, 1) > 0
     AND (r.kind IS NULL OR r.route_by = 'database')
     -- [per target] a kind whose one database has no room now is not counted either
     AND NOT EXISTS (SELECT 1 FROM target_flow tf WHERE tf.target = r.databases[1] AND tf.row_room = 0)
  UNION ALL
  -- A kind routed over several business databases: its due rows counted per target, each on
  -- timeouts_due_by_target (pending_count_for_target, sql/0053; the target stamped on each row
  -- when it was written, sql/0020: the count reads only that target's rows, as its claims do),
  -- less what that target's shards in flight cover. Always counted (the credit is per kind).
  -- Each target's count stops at that target's live capacity plus $4, so a target with a large
  -- backlog (held back by its rate limit, or down) never hides the others' rows.
  SELECT f.kind, c.target, f.shard_size, f.shard_room, f.row_room, true, greatest(c.n - coalesce(lt.capacity, 0), 0), false
    FROM flow f
    JOIN timeout_center.kind_routes r ON r.kind = f.kind AND r.route_by <> 'database'
   CROSS JOIN LATERAL (SELECT tg.target,
                              timeout_center.pending_count_for_target(f.kind::timeout_center.kind, tg.target,
                                coalesce(($12::jsonb -> f.kind ->> 0)::timestamptz, '-infinity'), $1,
                                coalesce((SELECT l2.capacity FROM live_target l2 WHERE l2.kind = f.kind AND l2.target = tg.target), 0) + $4) AS n
                         FROM (SELECT DISTINCT x AS target FROM unnest(r.databases || '{-unroutable}'::text[]) x) tg) c
    LEFT JOIN live_target lt ON lt.kind = f.kind AND lt.target = c.target
   WHERE coalesce(f.shard_room, 1) > 0 AND coalesce(f.row_room, 1) > 0
), candidates AS (
  -- [per target] shards against a rate-limited database take its shard size when smaller, and
  -- carry its row_room (NULL: no target limit) and what the kind has in flight against it.
  -- Adaptive shard size (issue 11; bench/analysis.md): `base` (the kind's shard size, or flow
  -- control's smaller one) when few are due, so a shard starts as soon as its rows are due;
  -- larger in a flood so that per-shard overheads (lease, lock, commit, the stream round trip) are
  -- paid per thousands of rows: a quarter of the uncovered rows, never above 20,000 rows, which
  -- bounds how long a shard holds its row locks (a cancel waits for it) to well under a second.
  -- When the count saw the end of the due rows (complete), the last shards halve (size/2,
  -- size/4, ... down to size/8), so the workers' last shards end close together instead of one
  -- slot running a whole large shard alone at the end of the flood. Only for a SQL handler (in the
  -- center's database, or in business databases: up to 5,000 rows there when their runs commit first) without flow control (no
  -- cap, no rate limit on the kind or its database: an operator who limits one keeps its
  -- configured size); code and HTTP handlers get their configured size (one call per shard). When nothing of the kind is in flight (a flood begins), its first shard keeps
  -- `base`, so the first closes commit one small shard after the due instant rather than one
  -- large one. A kind routed over several business databases is sized on its uncovered rows over
  -- all its unlimited targets (kind_uncovered), not on each target's: its flood is spread over the
  -- workers' slots by its targets already, and a quarter of one target's rows made sixteen
  -- databases' shards a sixteenth the size of one database's, each paying the per-shard costs
  -- (lease, claim, marker, fenced record, ACK) for a few hundred rows (issue 32: 160 shards of
  -- 1,250 rows on average for 200,000 over 16 databases, 45 of 4,444 over 3); and only its first
  -- target's first shard keeps `base`.
  SELECT n.kind, n.target, 1 + p.turn AS turn, n.shard_room, n.row_room, tf.row_room AS target_row_room,
         coalesce(lt.capacity, 0) AS target_in_flight, p.claim_limit::int AS claim_limit
    FROM need n
    LEFT JOIN target_flow tf ON tf.target = n.target
    LEFT JOIN live_target lt ON lt.kind = n.kind AND lt.target = n.target
   CROSS JOIN LATERAL (SELECT least(n.shard_size, coalesce(tf.shard_size, n.shard_size))::bigint AS base) b
   -- the kind's uncovered rows: its own for a kind with one target; over its targets without a
   -- rate limit for a routed kind (a limited one's rows go at its pace, in shards of its size)
   CROSS JOIN LATERAL (SELECT greatest(n.uncovered, (SELECT sum(n2.uncovered) FROM need n2
                                                      WHERE n2.kind = n.kind
                                                        AND NOT EXISTS (SELECT 1 FROM target_flow t2 WHERE t2.target = n2.target))) AS kind_uncovered) ku
   CROSS JOIN LATERAL (SELECT n.row_room IS NULL AND n.shard_room IS NULL AND tf.row_room IS NULL
                              AND (SELECT k.handler_type FROM timeout_center.kinds k WHERE k.kind = n.kind) = 'sql' AS adaptive,
                              -- a business database's shard (issue 32): where its first run commits in
                              -- two phases (the center allows prepared transactions: two-phase.ts), as
                              -- large as a same-database shard: its marker names no rows and it
                              -- commits no held ids, so a larger shard costs nothing more per row and
                              -- pays its per-shard costs (two transactions, PREPARE) less often
                              -- (measured 1.11x, docs/benchmarks.md "Issue 32, eighth pass"); its business
                              -- transaction holds the orders' row locks as long as a same-database
                              -- shard's does. Committing first, 5,000 rows at most: its held ids and
                              -- its marker's rows are committed, and read by every claim beside it
                              CASE WHEN n.target IS NULL OR current_setting('max_prepared_transactions')::int > 0 THEN 20000
                                   ELSE 5000 END AS largest) a
   CROSS JOIN LATERAL (SELECT CASE WHEN a.adaptive THEN greatest(b.base, least(a.largest, ceil(ku.kind_uncovered / 4.0)::bigint))
                                   ELSE b.base END AS size) ad
   CROSS JOIN LATERAL (SELECT ad.size,
                              -- one small first shard per kind: a routed kind's first target's
                              -- (its other targets' first shards start in the same instant and
                              -- would only pay the per-shard costs more often)
                              CASE WHEN EXISTS (SELECT 1 FROM live l WHERE l.kind = n.kind)
                                     OR n.target IS DISTINCT FROM (SELECT min(n3.target) FROM need n3 WHERE n3.kind = n.kind AND n3.uncovered > 0)
                                   THEN ad.size
                                   ELSE least(ad.size, b.base) END AS first,
                              -- the smallest shard of the halving end (equal shards: size)
                              CASE WHEN a.adaptive AND n.complete THEN least(ad.size, greatest(b.base, ceil(ad.size / 8.0)::bigint))
                                   ELSE ad.size END AS smallest) sz
   CROSS JOIN LATERAL (
     -- turn 0: the first shard; then the rest (rest rows) counted from the end: the kth shard from
     -- the end holds smallest * 2^(k-1) rows, at most size, and the one farthest from the end what
     -- is left over.
     SELECT 0 AS turn, least(sz.first, n.uncovered) AS claim_limit
     UNION ALL
     SELECT count(*) OVER () - e.k + 1,
            CASE WHEN e.k = count(*) OVER () THEN e.rest - e.before ELSE e.s END
       FROM (SELECT g.k, x.s, x.rest, sum(x.s) OVER (ORDER BY g.k) - x.s AS before
               FROM (SELECT greatest(n.uncovered - sz.first, 0) AS rest) r0
              CROSS JOIN LATERAL generate_series(1, ceil(r0.rest::numeric / sz.size)::int + 4) AS g (k)
              CROSS JOIN LATERAL (SELECT least(sz.size, sz.smallest << least(g.k - 1, 40)::int) AS s, r0.rest) x) e
      WHERE e.before < e.rest
   ) p
   WHERE n.uncovered > 0
), ranked AS (
  -- Per kind over all its targets: the nth new shard and the rows up to it, in turn order.
  SELECT c.*, row_number() OVER w AS nth, sum(c.claim_limit) OVER w AS rows_so_far
    FROM candidates c
  WINDOW w AS (PARTITION BY c.kind ORDER BY c.turn, c.target ROWS UNBOUNDED PRECEDING)
), kind_allowed AS (
  -- What flow control lets each kind have now (under a cap, shard_room shards; under a rate
  -- limit, whole shards within the budget, or all that is due when that is less).
  SELECT r.kind, r.target, r.turn, r.claim_limit, r.target_row_room, r.target_in_flight
    FROM ranked r
   WHERE r.nth <= coalesce(r.shard_room, 2147483647)
     AND (r.row_room IS NULL OR r.rows_so_far <= r.row_room)
), target_ranked AS (
  -- [per target] Per business database over all kinds, among the shards their kinds allow: the
  -- rows up to each, in turn order. Kinds take turns on a shared database too: a budget of a
  -- shard or two per plan would otherwise always go to the same kind, so within a turn the kind
  -- with less in flight against the database goes first, and ties go round by a hash of the
  -- kind and the plan's cutoff (a different order each plan, fair over a few).
  SELECT a.*, sum(a.claim_limit) OVER (PARTITION BY a.target ORDER BY a.turn, a.target_in_flight, md5(a.kind || $1::timestamptz::text), a.kind
                                       ROWS UNBOUNDED PRECEDING) AS target_rows_so_far
    FROM kind_allowed a
), planned AS (
  -- [per target] whole shards within the database's room (none for an unlimited one). Kinds
  -- take turns (every kind's first shard, then every kind's second, ...) so that one kind's
  -- flood does not take all the room.
  SELECT t.kind, t.target, t.turn, t.claim_limit
    FROM target_ranked t
   WHERE t.target_row_room IS NULL OR t.target_rows_so_far <= t.target_row_room
   ORDER BY t.turn, t.kind, t.target
   LIMIT $3
), new_scan AS (
  INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, shard_count, mapped_at)
  SELECT $5, $6, $1, 'mapped', (SELECT count(*) FROM planned), now()
   WHERE EXISTS (SELECT 1 FROM planned)
  RETURNING id
), new_shards AS (
  INSERT INTO timeout_center.shards (scan_id, kind, target, seq, size, claim_limit, published_at, publish_count, not_before, claim_floor, claim_floor_id)
  SELECT (SELECT id FROM new_scan), p.kind, p.target, row_number() OVER (ORDER BY p.turn, p.kind, p.target) - 1, 0, p.claim_limit, now(), 1, $10::timestamptz,
         ($12::jsonb -> p.kind ->> 0)::timestamptz, ($12::jsonb -> p.kind ->> 1)::bigint
    FROM planned p
  RETURNING id, scan_id, kind, target, claim_limit
)
SELECT s.id, s.scan_id, s.kind, s.target, s.claim_limit, n.uncovered, n.counted, n.complete
  FROM new_shards s JOIN need n ON n.kind = s.kind AND n.target IS NOT DISTINCT FROM s.target
 ORDER BY s.id
