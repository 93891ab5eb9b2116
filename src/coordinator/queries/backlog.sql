-- backlog: per kind, what is due and not final, what shards hold, and the oldest lag, for the lag
-- monitor's gauges and its SLA alert (lag-monitor.ts). The backlog view's figures (sql/0017), with
-- the due rows counted from the kind's claim floor (sql/0030): the view counts them from the due
-- index's start, past every row claimed since the oldest snapshot in the database was taken
-- (docs/architecture.md "The claim floor"). A pending row below a floor is one written late since
-- the last tick, counted at the next.
--   $1 claim floors: {"kind": [available_at, id]} (jsonb; a kind missing: from the start)
-- @params floors: string
SELECT k.kind, p.pending_due, f.in_flight,
       extract(epoch FROM now() - least(p.oldest_due_at, f.oldest_due_at))::float8 AS lag_s, k.paused
  FROM timeout_center.kinds k
 CROSS JOIN LATERAL (SELECT count(*) AS pending_due, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()
                        AND (t.available_at, t.id) >= (coalesce(($1::jsonb -> k.kind ->> 0)::timestamptz, '-infinity'),
                                                       coalesce(($1::jsonb -> k.kind ->> 1)::bigint, 0))) p
 CROSS JOIN LATERAL (SELECT count(*) AS in_flight, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'dispatched' AND t.shard_id IS NOT NULL) f
 WHERE p.pending_due > 0 OR f.in_flight > 0
