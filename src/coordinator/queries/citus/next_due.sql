-- next_due, Citus form: next_due.sql reading no timeouts itself: what it probed per kind comes in
-- $2 from citus/due_probe.sql (run per kind just before). Everything else reads the control
-- plane on the Citus coordinator. Keep in step with next_due.sql.
-- next_due: the database clock, the latest claimable time among the timeouts already due (NULL:
-- nothing is due), the earliest claimable time still to come (next_after: when nothing is due the
-- coordinator sleeps until then, and when the due rows are all covered by shards in flight it
-- wakes then rather than polling), the shards in flight, and the kinds' flow controls. One index
-- probe each way per kind on timeouts_due_by_kind, both starting at now(): neither walks past a
-- flood's rows from its oldest on, which shards are claiming (locked) or have just taken (dead
-- until vacuum), at every tick of the flood.
--   $1 kinds this coordinator serves (text[])
--   $2 per kind, what citus/due_probe.sql found: {"kind": [latest due, next after]} (jsonb,
--      timestamps or null)
-- @params kinds: string[], probes: string
-- Flow control (sql/0006): a paused kind is left out of latest_due / next_after (nothing of it is
-- due for the map), and its queued shards are left out of in_flight (they wait for the resume
-- and must not take the room of other kinds). So are the queued shards of a kind no live worker
-- serves (sql/0013): they wait for a worker. controls: {"kind": [paused, max_running_shards,
-- rate_limit, has_due, served]} for every kind this coordinator maps (the rate budget and the
-- gauges; a handful of rows); has_due (one index probe, rate-limited kinds only, else null) tells
-- the rate budget whether the kind has anything due, so an idle kind saves up no burst; served:
-- a live worker serves it. unserved: the kinds, not paused, that no live worker serves while they
-- have a shard waiting or a timeout due (the coordinator warns and alerts).
-- target_controls (sql/0009): {"target": [rate_limit, has_due]} for every rate-limited business
-- database; has_due: some unpaused served kind routed to it has a timeout due (for a kind routed
-- over several databases this cannot say which: the bucket may then save up its burst cap).
SELECT now() AS now,
       (SELECT max(($2::jsonb -> kc.kind ->> 0)::timestamptz)
          FROM unnest($1::text[]) AS k (kind)
          JOIN timeout_center.kinds kc ON kc.kind = k.kind AND NOT kc.paused) AS latest_due,
       (SELECT min(($2::jsonb -> kc.kind ->> 1)::timestamptz)
          FROM unnest($1::text[]) AS k (kind)
          JOIN timeout_center.kinds kc ON kc.kind = k.kind AND NOT kc.paused) AS next_after,
       (SELECT count(*) FROM timeout_center.shards sh
         WHERE sh.state IN ('queued', 'running')
           AND NOT (sh.state = 'queued' AND EXISTS (SELECT 1 FROM timeout_center.kinds kc WHERE kc.kind = sh.kind AND kc.paused))
           AND NOT (sh.state = 'queued' AND NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE sh.kind = ANY (w.kinds))))::int AS in_flight,
       (SELECT coalesce(jsonb_object_agg(kc.kind, jsonb_build_array(kc.paused, kc.max_running_shards, kc.rate_limit,
                 CASE WHEN kc.rate_limit IS NOT NULL
                      THEN ($2::jsonb -> kc.kind ->> 0) IS NOT NULL END,
                 EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE kc.kind = ANY (w.kinds)))), '{}')
          FROM timeout_center.kinds kc
         WHERE kc.kind = ANY ($1::text[])) AS controls,
       (SELECT coalesce(array_agg(kc.kind ORDER BY kc.kind), '{}')
          FROM timeout_center.kinds kc
         WHERE kc.kind = ANY ($1::text[]) AND NOT kc.paused
           AND NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE kc.kind = ANY (w.kinds))
           AND (EXISTS (SELECT 1 FROM timeout_center.shards sh WHERE sh.kind = kc.kind AND sh.state = 'queued')
                OR ($2::jsonb -> kc.kind ->> 0) IS NOT NULL)) AS unserved,
       (SELECT coalesce(jsonb_object_agg(tg.target, jsonb_build_array(tg.rate_limit,
                 EXISTS (SELECT 1 FROM timeout_center.kind_routes r
                           JOIN timeout_center.kinds kc ON kc.kind = r.kind AND NOT kc.paused
                          WHERE r.kind = ANY ($1::text[]) AND tg.target = ANY (r.databases)
                            AND ($2::jsonb -> r.kind ->> 0) IS NOT NULL))), '{}')
          FROM timeout_center.targets tg
         WHERE tg.rate_limit IS NOT NULL) AS target_controls
