-- next_due: the database clock, the latest claimable time among the timeouts already due (NULL:
-- nothing is due), the earliest claimable time still to come (next_after: when nothing is due the
-- coordinator sleeps until then, and when the due rows are all covered by shards in flight it
-- wakes then rather than polling), the shards in flight, and the kinds' flow controls. One index
-- probe each way per kind on timeouts_due_by_kind, both starting at now(): neither walks past a
-- flood's rows from its oldest on, which shards are claiming (locked) or have just taken (dead
-- until vacuum), at every tick of the flood.
--   $1 kinds this coordinator serves (text[])
--   $2 claim floors: {"kind": floor} from the previous tick (jsonb; a kind missing: from the start)
--   $3 marks: [{"at": clock, "xid": transaction id}, ...] returned by earlier ticks (jsonb)
-- @params kinds: string[], floors: string, marks: string
-- Claim floors (sql/0030; docs/architecture.md "The claim floor"): per kind, the due index is
-- read from the kind's floor on, never from its start: while an old snapshot anywhere in the
-- cluster keeps the rows already claimed from being vacuumed, their index entries stay in front of
-- the live ones, and a walk from the start fetches each. The new floor of a kind is the least of:
-- its oldest pending row from the previous floor on (the only walk past dead entries: those
-- claimed since the previous tick); its oldest pending row written late (timeouts_written_late);
-- and a second before the latest mark taken before every transaction running now began writing
-- (none yet: no floor). Every probe below reads from the new floors; they are returned (floors)
-- with this tick's mark (mark_at, mark_xid: the clock, then this statement's new transaction id,
-- in that order) and the horizon it was compared with (xmin), for the next tick.
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
WITH horizon AS MATERIALIZED (
  SELECT max(m.at) AS at
    FROM jsonb_to_recordset($3::jsonb) AS m (at timestamptz, xid text)
   WHERE m.xid::xid8 <= pg_snapshot_xmin(pg_current_snapshot())
), floors AS MATERIALIZED (
  SELECT k.kind,
         least((SELECT t.available_at FROM timeout_center.timeouts t
                 WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'pending'
                   AND t.available_at >= coalesce(($2::jsonb ->> k.kind)::timestamptz, '-infinity')
                 ORDER BY t.available_at LIMIT 1),
               (SELECT t.available_at FROM timeout_center.timeouts t
                 WHERE t.kind = k.kind::timeout_center.kind AND t.state = 'pending' AND t.written_late
                 ORDER BY t.available_at LIMIT 1),
               coalesce((SELECT h.at - interval '1 second' FROM horizon h), '-infinity')) AS floor
    FROM unnest($1::text[]) AS k (kind)
), mark AS MATERIALIZED (
  -- the clock first, then a new transaction id (the subquery is read before the outer list)
  SELECT c.at, pg_current_xact_id()::text AS xid FROM (SELECT clock_timestamp() AS at OFFSET 0) c
)
SELECT now() AS now,
       (SELECT jsonb_object_agg(f.kind, f.floor) FROM floors f) AS floors,
       (SELECT m.at FROM mark m)::text AS mark_at, (SELECT m.xid FROM mark m) AS mark_xid,
       pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
       (SELECT max(d.available_at)
          FROM unnest($1::text[]) AS k (kind)
          JOIN timeout_center.kinds kc ON kc.kind = k.kind AND NOT kc.paused
         CROSS JOIN LATERAL (SELECT t.available_at FROM timeout_center.timeouts t
                              WHERE t.kind = kc.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()
                                AND t.available_at >= (SELECT f.floor FROM floors f WHERE f.kind = kc.kind)
                              ORDER BY t.available_at DESC LIMIT 1) d) AS latest_due,
       (SELECT min(d.available_at)
          FROM unnest($1::text[]) AS k (kind)
          JOIN timeout_center.kinds kc ON kc.kind = k.kind AND NOT kc.paused
         CROSS JOIN LATERAL (SELECT t.available_at FROM timeout_center.timeouts t
                              WHERE t.kind = kc.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at > now()
                              ORDER BY t.available_at LIMIT 1) d) AS next_after,
       (SELECT count(*) FROM timeout_center.shards sh
         WHERE sh.state IN ('queued', 'running')
           AND NOT (sh.state = 'queued' AND EXISTS (SELECT 1 FROM timeout_center.kinds kc WHERE kc.kind = sh.kind AND kc.paused))
           AND NOT (sh.state = 'queued' AND NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE sh.kind = ANY (w.kinds))))::int AS in_flight,
       (SELECT coalesce(jsonb_object_agg(kc.kind, jsonb_build_array(kc.paused, kc.max_running_shards, kc.rate_limit,
                 CASE WHEN kc.rate_limit IS NOT NULL
                      THEN EXISTS (SELECT 1 FROM timeout_center.timeouts t
                                    WHERE t.kind = kc.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()
                                      AND t.available_at >= (SELECT f.floor FROM floors f WHERE f.kind = kc.kind)) END,
                 EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE kc.kind = ANY (w.kinds)))), '{}')
          FROM timeout_center.kinds kc
         WHERE kc.kind = ANY ($1::text[])) AS controls,
       (SELECT coalesce(array_agg(kc.kind ORDER BY kc.kind), '{}')
          FROM timeout_center.kinds kc
         WHERE kc.kind = ANY ($1::text[]) AND NOT kc.paused
           AND NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE kc.kind = ANY (w.kinds))
           AND (EXISTS (SELECT 1 FROM timeout_center.shards sh WHERE sh.kind = kc.kind AND sh.state = 'queued')
                OR EXISTS (SELECT 1 FROM timeout_center.timeouts t
                            WHERE t.kind = kc.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()
                              AND t.available_at >= (SELECT f.floor FROM floors f WHERE f.kind = kc.kind)))) AS unserved,
       (SELECT coalesce(jsonb_object_agg(tg.target, jsonb_build_array(tg.rate_limit,
                 EXISTS (SELECT 1 FROM timeout_center.kind_routes r
                           JOIN timeout_center.kinds kc ON kc.kind = r.kind AND NOT kc.paused
                          WHERE r.kind = ANY ($1::text[]) AND tg.target = ANY (r.databases)
                            AND EXISTS (SELECT 1 FROM timeout_center.timeouts t
                                         WHERE t.kind = r.kind::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()
                                           AND t.available_at >= (SELECT f.floor FROM floors f WHERE f.kind = r.kind))))), '{}')
          FROM timeout_center.targets tg
         WHERE tg.rate_limit IS NOT NULL) AS target_controls
