-- next_due: the database clock, the latest claimable time among the timeouts already due (NULL:
-- nothing is due), the earliest claimable time still to come within a minute (next_after: when
-- nothing is due the coordinator sleeps until then, and when the due rows are all covered by
-- shards in flight it wakes then rather than polling; NULL: nothing within a minute, it looks
-- again in one, the longest it ever sleeps, tick-loop.ts LONGEST_SLEEP_MS; the probe stops there
-- so that it never walks the entries of rows cancelled ahead of their due time, which a held
-- snapshot keeps), the shards in flight, and the kinds' flow controls. One index
-- probe each way per kind on timeouts_due_by_key, both starting at now(): neither walks past a
-- flood's rows from its oldest on, which shards are claiming (locked) or have just taken (dead
-- until vacuum), at every tick of the flood. Every read of pending timeouts goes through
-- pending_first / pending_last (sql/0053) or pending_late_first (sql/0054): planned by themselves,
-- they walk their index in key order whatever the row estimate (after autovacuum's pass under a
-- held snapshot the statistics count a row or two, and an inline probe read
-- timeouts_one_live_per_biz whole).
--   $1 kinds this coordinator serves (text[])
--   $2 claim floors: {"kind": [available_at, id]} from the previous tick (jsonb; a kind missing:
--      from the start)
--   $3 marks: [{"at": clock, "xid": transaction id}, ...] returned by earlier ticks (jsonb)
--   $4 the oldest shard id in flight at an earlier tick (0: count from the first): the shards
--      queued or running are counted from it (shards_in_flight_by_id, sql/0042)
--   $5 the oldest scan not reduced at an earlier tick (0: from the first)
--   $6 the server $2-$5 were computed on (the column server of an earlier tick; '': none). They
--      hold only there: a standby promoted without the primary's last commits has rows pending
--      again, and scans not reduced, below them, and its transaction ids are not the marks'. On
--      another server (or the same one restarted) they are left out, as on a first tick.
--   $7 the xmin an earlier tick returned, the one whose floors $2 are ('': none, a first tick)
-- @params kinds: string[], floors: string, marks: string, shardsFrom: number, scansFrom: number, server: string, lateFrom: string
-- Claim floors (sql/0030; docs/architecture.md "The claim floor"): per kind, the due index is
-- read from the kind's floor on, never from its start: while an old snapshot anywhere in the
-- cluster keeps the rows already claimed from being vacuumed, their index entries stay in front of
-- the live ones, and a walk from the start fetches each. The new floor of a kind is the least of:
-- the key (available_at, id) of its oldest pending row from the previous floor on (the only walk
-- past dead entries: those claimed since the previous tick, within one due instant too: sql/0041);
-- its oldest pending row written late, from that row's instant; and a second before the latest
-- mark taken before every transaction running now began writing (none yet: no floor), from that
-- instant. Every probe below reads from the new floors; they are
-- returned (floors) with this tick's mark (mark_at, mark_xid: the clock, then this statement's new
-- transaction id, in that order) and the horizon it was compared with (xmin), for the next tick.
-- The late probe (pending_late_first, sql/0054) reads only the rows written late by transactions
-- from the previous tick's xmin ($7) on: a row that tick saw is still pending at the key it had,
-- at or above that tick's floor, where this tick's walk starts (a write that moves it or makes it
-- pending again is a new late row); a row it could not see was written by a transaction running
-- then or begun since. Without $7 (a first tick, another server) it reads every row written late.
-- refreshed (sql/0041): the shards in flight that have not claimed yet (their rows not locked by
-- a run: SKIP LOCKED) take the new floor when it is above theirs, so a flood mapped ahead in one
-- plan claims from where the claims before it ended, not from the floor of its plan; those a
-- flood claims newest first (take_lease.sql from_newest: not_before set, odd seq) take a ceiling,
-- the newest pending key due by their instant, walked down from the lowest ceiling any of them
-- has. A floor computed at any tick is a safe lower bound for any later claim (docs/architecture.md
-- "The claim floor"), and a ceiling only narrows a newest-first claim (what it leaves is claimed
-- oldest first). A row version per shard refreshed, only when its key moves.
-- in_flight counts from $4 (the oldest shard in flight at an earlier tick; in_flight_from returns
-- this tick's): shards only enter flight when written (a new, higher id) or go back from running
-- to queued, so the shards below it are final, and their row versions left in the index under an
-- old snapshot are not walked. open_scans_from: the same for scans (the reduce and the reaper
-- read from both).
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
WITH server AS MATERIALIZED (
  -- this server, as long as it runs: its postmaster's start and its address
  SELECT pg_postmaster_start_time()::text || coalesce(' ' || host(inet_server_addr()) || ':' || inet_server_port()::text, '') AS server
), inputs AS MATERIALIZED (
  SELECT CASE WHEN same THEN $2::jsonb ELSE '{}' END AS floors, CASE WHEN same THEN $3::jsonb ELSE '[]' END AS marks,
         CASE WHEN same THEN $4::bigint ELSE 0 END AS shards_from, CASE WHEN same THEN $5::bigint ELSE 0 END AS scans_from,
         CASE WHEN same THEN coalesce(nullif($7::text, ''), '0')::xid8 ELSE '0'::xid8 END AS late_from
    FROM (SELECT s.server = $6::text AS same FROM server s) x
), horizon AS MATERIALIZED (
  SELECT max(m.at) AS at
    FROM jsonb_to_recordset((SELECT i.marks FROM inputs i)) AS m (at timestamptz, xid text)
   WHERE m.xid::xid8 <= pg_snapshot_xmin(pg_current_snapshot())
), bound AS MATERIALIZED (
  SELECT coalesce((SELECT h.at - interval '1 second' FROM horizon h), '-infinity') AS at
), walked AS MATERIALIZED (
  -- per kind: its oldest pending key from the previous floor on, its oldest pending instant written
  -- late, and the marks' bound. The walk stops at the bound: a floor is never above it, and past
  -- it lie only rows not yet due and, under a held snapshot, the entries of those cancelled
  -- (a kind with nothing pending would walk every one of them at every tick)
  SELECT k.kind, w.available_at AS walk_at, w.id AS walk_id,
         timeout_center.pending_late_first(k.kind::timeout_center.kind, (SELECT i.late_from FROM inputs i)) AS late_at,
         (SELECT b.at FROM bound b) AS bound_at
    FROM unnest($1::text[]) AS k (kind)
    LEFT JOIN LATERAL timeout_center.pending_first(k.kind::timeout_center.kind,
                        coalesce(((SELECT i.floors FROM inputs i) -> k.kind ->> 0)::timestamptz, '-infinity'),
                        coalesce(((SELECT i.floors FROM inputs i) -> k.kind ->> 1)::bigint, 0), (SELECT b.at FROM bound b)) w ON true
), floors AS MATERIALIZED (
  -- the least of the three keys; the last two are whole instants (id 0), so the walked row's id
  -- counts only when its instant is below both
  SELECT w.kind, least(w.walk_at, w.late_at, w.bound_at) AS floor,
         CASE WHEN w.walk_at < w.bound_at AND w.walk_at < coalesce(w.late_at, 'infinity') THEN w.walk_id ELSE 0 END AS floor_id
    FROM walked w
), ceilings AS MATERIALIZED (
  -- per kind and flood instant with a newest-first shard waiting: the newest pending key due by it,
  -- walked down from the lowest ceiling those shards have (or the instant)
  SELECT w.kind, w.not_before, c.at, c.id
    FROM (SELECT DISTINCT ON (sh.kind, sh.not_before) sh.kind, sh.not_before,
                 coalesce(sh.claim_ceiling, sh.not_before) AS top_at, coalesce(sh.claim_ceiling_id, 9223372036854775807) AS top_id
            FROM timeout_center.shards sh
           WHERE sh.state IN ('queued', 'running') AND sh.id >= (SELECT i.shards_from FROM inputs i) AND sh.not_before IS NOT NULL AND sh.seq % 2 = 1
             AND sh.claim_attempt = 0 AND sh.kind = ANY ($1::text[])
           ORDER BY sh.kind, sh.not_before, coalesce(sh.claim_ceiling, sh.not_before), coalesce(sh.claim_ceiling_id, 9223372036854775807)) w
    JOIN floors f ON f.kind = w.kind
   CROSS JOIN LATERAL (SELECT p.available_at AS at, p.id
                         FROM timeout_center.pending_last(w.kind::timeout_center.kind, f.floor, f.floor_id, w.top_at, w.top_id) p) c
), refresh AS MATERIALIZED (
  -- the shards in flight that have not claimed, whose floor or ceiling moves
  SELECT s.id, r.floor_moves, f.floor, f.floor_id, c.at AS ceiling, c.id AS ceiling_id
    FROM timeout_center.shards s
    JOIN floors f ON f.kind = s.kind
    LEFT JOIN ceilings c ON c.kind = s.kind AND c.not_before = s.not_before AND s.seq % 2 = 1
   CROSS JOIN LATERAL (SELECT (f.floor, f.floor_id) > (coalesce(s.claim_floor, '-infinity'), coalesce(s.claim_floor_id, 0)) AS floor_moves) r
   WHERE s.state IN ('queued', 'running') AND s.id >= (SELECT i.shards_from FROM inputs i) AND s.claim_attempt = 0 AND s.kind = ANY ($1::text[])
     AND (r.floor_moves OR (c.at, c.id) < (coalesce(s.claim_ceiling, 'infinity'), coalesce(s.claim_ceiling_id, 9223372036854775807)))
     FOR UPDATE OF s SKIP LOCKED
), refreshed AS (
  UPDATE timeout_center.shards sh
     SET claim_floor = CASE WHEN r.floor_moves THEN r.floor ELSE sh.claim_floor END,
         claim_floor_id = CASE WHEN r.floor_moves THEN r.floor_id ELSE sh.claim_floor_id END,
         claim_ceiling = coalesce(r.ceiling, sh.claim_ceiling),
         claim_ceiling_id = coalesce(r.ceiling_id, sh.claim_ceiling_id)
    FROM refresh r
   WHERE sh.id = r.id
  RETURNING sh.id
), mark AS MATERIALIZED (
  -- the clock first, then a new transaction id (the subquery is read before the outer list)
  SELECT c.at, pg_current_xact_id()::text AS xid FROM (SELECT clock_timestamp() AS at OFFSET 0) c
)
SELECT now() AS now, (SELECT s.server FROM server s) AS server,
       (SELECT jsonb_object_agg(f.kind, jsonb_build_array(f.floor, f.floor_id::text)) FROM floors f) AS floors,
       (SELECT count(*) FROM refreshed)::int AS refreshed,
       (SELECT m.at FROM mark m)::text AS mark_at, (SELECT m.xid FROM mark m) AS mark_xid,
       pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
       (SELECT max(d.available_at)
          FROM unnest($1::text[]) AS k (kind)
          JOIN timeout_center.kinds kc ON kc.kind = k.kind AND NOT kc.paused
         CROSS JOIN LATERAL timeout_center.pending_last(kc.kind::timeout_center.kind, (SELECT f.floor FROM floors f WHERE f.kind = kc.kind), 0,
                                                         now(), 9223372036854775807) d) AS latest_due,
       (SELECT min(d.available_at)
          FROM unnest($1::text[]) AS k (kind)
          JOIN timeout_center.kinds kc ON kc.kind = k.kind AND NOT kc.paused
         CROSS JOIN LATERAL timeout_center.pending_first(kc.kind::timeout_center.kind, now() + interval '1 microsecond', 0, now() + interval '1 minute') d) AS next_after,
       -- with nothing in flight, the next shard written (a higher id than any now)
       coalesce((SELECT min(sh.id) FROM timeout_center.shards sh WHERE sh.state IN ('queued', 'running') AND sh.id >= (SELECT i.shards_from FROM inputs i)),
                (SELECT max(sh.id) + 1 FROM timeout_center.shards sh), (SELECT i.shards_from FROM inputs i))::text AS in_flight_from,
       -- the same for the scans not reduced (reduce.sql, close_orphan_scans.sql: scans_open)
       coalesce((SELECT min(sc.id) FROM timeout_center.scans sc WHERE sc.state <> 'reduced' AND sc.id >= (SELECT i.scans_from FROM inputs i)),
                (SELECT max(sc.id) + 1 FROM timeout_center.scans sc), (SELECT i.scans_from FROM inputs i))::text AS open_scans_from,
       (SELECT count(*) FROM timeout_center.shards sh
         WHERE sh.state IN ('queued', 'running') AND sh.id >= (SELECT i.shards_from FROM inputs i)
           AND NOT (sh.state = 'queued' AND EXISTS (SELECT 1 FROM timeout_center.kinds kc WHERE kc.kind = sh.kind AND kc.paused))
           AND NOT (sh.state = 'queued' AND NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE sh.kind = ANY (w.kinds))))::int AS in_flight,
       (SELECT coalesce(jsonb_object_agg(kc.kind, jsonb_build_array(kc.paused, kc.max_running_shards, kc.rate_limit,
                 CASE WHEN kc.rate_limit IS NOT NULL
                      THEN EXISTS (SELECT 1 FROM timeout_center.pending_first(kc.kind::timeout_center.kind, (SELECT f.floor FROM floors f WHERE f.kind = kc.kind), 0, now())) END,
                 EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE kc.kind = ANY (w.kinds)))), '{}')
          FROM timeout_center.kinds kc
         WHERE kc.kind = ANY ($1::text[])) AS controls,
       (SELECT coalesce(array_agg(kc.kind ORDER BY kc.kind), '{}')
          FROM timeout_center.kinds kc
         WHERE kc.kind = ANY ($1::text[]) AND NOT kc.paused
           AND NOT EXISTS (SELECT 1 FROM timeout_center.live_workers w WHERE kc.kind = ANY (w.kinds))
           AND (EXISTS (SELECT 1 FROM timeout_center.shards sh WHERE sh.kind = kc.kind AND sh.state = 'queued' AND sh.id >= (SELECT i.shards_from FROM inputs i))
                OR EXISTS (SELECT 1 FROM timeout_center.pending_first(kc.kind::timeout_center.kind, (SELECT f.floor FROM floors f WHERE f.kind = kc.kind), 0, now())))) AS unserved,
       (SELECT coalesce(jsonb_object_agg(tg.target, jsonb_build_array(tg.rate_limit,
                 EXISTS (SELECT 1 FROM timeout_center.kind_routes r
                           JOIN timeout_center.kinds kc ON kc.kind = r.kind AND NOT kc.paused
                          WHERE r.kind = ANY ($1::text[]) AND tg.target = ANY (r.databases)
                            AND EXISTS (SELECT 1 FROM timeout_center.pending_first(r.kind::timeout_center.kind, (SELECT f.floor FROM floors f WHERE f.kind = r.kind), 0, now()))))), '{}')
          FROM timeout_center.targets tg
         WHERE tg.rate_limit IS NOT NULL) AS target_controls
