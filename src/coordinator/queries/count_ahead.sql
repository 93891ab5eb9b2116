-- count_ahead: before a flood's due instant, count what will be due at it, so the plan at the
-- instant writes its shards from this count (the coordinator's credit, plan_shards $7) instead of
-- counting hundreds of thousands of rows while the first shards wait. It reads, writes nothing,
-- and needs no fence: a credit only sizes shards, and a shard claims what is really due when it
-- runs. Per kind, the same count plan_shards makes (pending_count, sql/0053: due order on
-- timeouts_due_by_key whatever the row estimate, beyond the claim limits of the kind's shards
-- queued or running, stopping at those plus $3), for the kinds a plan sizes to the backlog only:
-- not paused, capped or rate-limited (flow control sizes and paces those plans itself), and not
-- routed over several business databases (counted per database at every plan).
--   $1 kinds (text[])   $2 cutoff: the due instant (timestamptz)   $3 max rows counted per kind
--   $4 claim floors: {"kind": [available_at, id]} (jsonb, next_due.sql; a kind missing: from the
--      start): the count seeks the due index from the kind's floor, past the rows already claimed
--   $5 the oldest shard id in flight (next_due.sql's in_flight_from, sql/0042)
-- @params kinds: string[], cutoff: Date, maxRows: number, floors: string, shardsFrom: number
-- Returns per kind with something due by the cutoff: uncovered rows, and whether the count saw
-- the last due row (complete).
SELECT k.kind,
       greatest(cnt.n - coalesce(l.capacity, 0), 0)::bigint AS uncovered,
       cnt.n < coalesce(l.capacity, 0) + $3 AS complete
  FROM timeout_center.kinds k
  LEFT JOIN timeout_center.kind_routes r ON r.kind = k.kind
  LEFT JOIN LATERAL (SELECT sum(sh.claim_limit)::bigint AS capacity
                       FROM timeout_center.shards sh
                      WHERE sh.kind = k.kind AND sh.state IN ('queued', 'running') AND sh.id >= $5) l ON true
 CROSS JOIN LATERAL (SELECT timeout_center.pending_count(k.kind::timeout_center.kind,
                                                        coalesce(($4::jsonb -> k.kind ->> 0)::timestamptz, '-infinity'),
                                                        coalesce(($4::jsonb -> k.kind ->> 1)::bigint, 0),
                                                        $2, coalesce(l.capacity, 0) + $3) AS n
                      OFFSET 0) cnt -- evaluated once: pulled up, the count ran for each use of n
 WHERE k.kind = ANY ($1::text[])
   AND NOT k.paused AND k.max_running_shards IS NULL AND k.rate_limit IS NULL
   AND (r.kind IS NULL OR r.route_by = 'database')
   AND cnt.n > coalesce(l.capacity, 0)
