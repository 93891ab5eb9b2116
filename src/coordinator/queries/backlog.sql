-- backlog: for one kind, what is due and not final, what shards hold, and the oldest lag, for the
-- lag monitor's gauges and its SLA alert (lag-monitor.ts). The backlog view's figures (sql/0017),
-- with the due rows counted from the kind's claim floor (sql/0030): the view counts them from the
-- due index's start, past every row claimed since the oldest snapshot in the database was taken
-- (docs/architecture.md "The claim floor"). A pending row below a floor is one written late since
-- the last tick, counted at the next.
-- One kind per statement. The due rows are counted by pending_backlog (sql/0053): the due index in
-- key order from the floor whatever the row estimate. Under a held snapshot the statistics count
-- the live rows only (a few thousand, or after autovacuum's pass a row or two) while the indexes
-- hold every version since the snapshot began, and an inline count could take
-- timeouts_one_live_per_biz by the kind alone, reading all of its entries (1,981,172 of them, 9 s,
-- 21 minutes into a held snapshot). The rows in flight are counted per shard in flight (from the
-- oldest at an earlier tick, as next_due.sql counts them), each on timeouts_in_flight: never by the
-- kind, whose index holds every version of every row of it.
--   $1 kind   $2 its claim floor: the instant (NULL: from the start)   $3 and the id (0: the instant's first)
--   $4 the oldest shard id in flight at an earlier tick (0: from the first; next_due.sql's in_flight_from)
-- @params kind: string, floorAt: string | null, floorId: string, shardsFrom: number
SELECT k.kind, p.pending_due, f.in_flight,
       extract(epoch FROM now() - least(p.oldest_due_at, f.oldest_due_at))::float8 AS lag_s, k.paused
  FROM timeout_center.kinds k
 CROSS JOIN LATERAL timeout_center.pending_backlog($1::text::timeout_center.kind, coalesce($2::timestamptz, '-infinity'), $3::bigint, now()) p
 CROSS JOIN LATERAL (SELECT coalesce(sum(d.n), 0)::bigint AS in_flight, min(d.oldest_due_at) AS oldest_due_at
                       FROM timeout_center.shards sh
                      CROSS JOIN LATERAL (SELECT count(*) AS n, min(t.due_at) AS oldest_due_at
                                            FROM timeout_center.timeouts t
                                           WHERE t.shard_id = sh.id AND t.state = 'dispatched') d
                      WHERE sh.kind = $1 AND sh.state IN ('queued', 'running') AND sh.id >= $4::bigint) f
 WHERE k.kind = $1 AND (p.pending_due > 0 OR f.in_flight > 0)
