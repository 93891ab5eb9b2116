-- next_due: the database clock and the earliest time a pending timeout becomes claimable.
--   $1 kinds this coordinator serves (text[])
SELECT now() AS now,
       (SELECT min(available_at) FROM timeout_center.timeouts
         WHERE state = 'pending' AND kind = ANY ($1::text[])) AS next_due,
       (SELECT count(*) FROM timeout_center.shards WHERE state IN ('queued', 'running'))::int AS in_flight
