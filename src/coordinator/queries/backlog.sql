-- backlog: for one kind, what is due and not final, what shards hold, and the oldest lag, for the
-- lag monitor's gauges and its SLA alert (lag-monitor.ts). The backlog view's figures (sql/0017),
-- with the due rows counted from the kind's claim floor (sql/0030): the view counts them from the
-- due index's start, past every row claimed since the oldest snapshot in the database was taken
-- (docs/architecture.md "The claim floor"). A pending row below a floor is one written late since
-- the last tick, counted at the next.
-- One kind per statement, its name and floor as constants: under a held snapshot the statistics
-- count the live rows only (a few thousand) while the indexes hold every version since the
-- snapshot began, and with the kind and floor read from a join the planner estimated one row for
-- any index led by the kind and could take timeouts_one_live_per_biz, reading all of its entries
-- (1,981,172 of them, 9 s, 21 minutes into a held snapshot). With constants it prices the floor's
-- range on timeouts_due_by_key against the whole of the other.
--   $1 kind   $2 its claim floor: the instant (NULL: from the start)   $3 and the id (0: the instant's first)
-- @params kind: string, floorAt: string | null, floorId: string
SELECT k.kind, p.pending_due, f.in_flight,
       extract(epoch FROM now() - least(p.oldest_due_at, f.oldest_due_at))::float8 AS lag_s, k.paused
  FROM timeout_center.kinds k
 CROSS JOIN LATERAL (SELECT count(*) AS pending_due, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = $1::text::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()
                        AND (t.available_at, t.id) >= (coalesce($2::timestamptz, '-infinity'), $3::bigint)) p
 CROSS JOIN LATERAL (SELECT count(*) AS in_flight, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = $1::text::timeout_center.kind AND t.state = 'dispatched' AND t.shard_id IS NOT NULL) f
 WHERE k.kind = $1 AND (p.pending_due > 0 OR f.in_flight > 0)
