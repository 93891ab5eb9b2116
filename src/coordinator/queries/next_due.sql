-- next_due: the database clock, the earliest time a pending timeout becomes claimable, the latest
-- claimable time among those already due (one index probe each way per kind on
-- timeouts_due_by_kind), and the shards in flight.
--   $1 kinds this coordinator serves (text[])
SELECT now() AS now,
       (SELECT min(d.available_at)
          FROM unnest($1::text[]) AS k (kind)
         CROSS JOIN LATERAL (SELECT t.available_at FROM timeout_center.timeouts t
                              WHERE t.kind = k.kind AND t.state = 'pending'
                              ORDER BY t.available_at LIMIT 1) d) AS next_due,
       (SELECT max(d.available_at)
          FROM unnest($1::text[]) AS k (kind)
         CROSS JOIN LATERAL (SELECT t.available_at FROM timeout_center.timeouts t
                              WHERE t.kind = k.kind AND t.state = 'pending' AND t.available_at <= now()
                              ORDER BY t.available_at DESC LIMIT 1) d) AS latest_due,
       (SELECT count(*) FROM timeout_center.shards WHERE state IN ('queued', 'running'))::int AS in_flight
