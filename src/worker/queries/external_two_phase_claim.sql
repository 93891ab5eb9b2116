-- external_two_phase_claim: the claim of a two-phase external run (external-executor.ts,
-- runTwoPhase), in the center transaction that stays open, and is PREPAREd, until the business
-- commit. It locks the shard's rows and writes none of them: the move after the handler
-- (external_two_phase_move.sql) writes each one once, to the history, with what the business
-- database did with it (applied or skipped), as the same-database claim writes each row once. A
-- run that fails or dies before its PREPARE rolls back: its rows were never written, and are
-- pending, unlocked. Takes no claim lock (external_claim_lock.sql): its rows stay locked until
-- the run ends, so the claims beside it pass them by (SKIP LOCKED), as the same-database claims
-- do. It passes by the ids the kind's other live shards hold (a commit-first run's claim) as
-- external_claim.sql does; the run then checks, with a snapshot of its own, that no shard
-- committed a hold on one of them meanwhile (external_two_phase_overlap.sql, on the held_ids
-- written here), and backs out if one did.
--   $1 shard id   $2 kind   $3 claim limit   $4 lease token
--   $5 routed: only the rows whose target (stamped when the row was written) is the shard's
--   $6 payloads: the handler reads them (boolean)
-- @params shardId: number, kind: string, claimLimit: number, leaseToken: string, routed: boolean, payloads: boolean
-- @slot claimOrder tc:claim-order
-- Returns one row (none when the lease is not ours, the shard was claimed before, or it has rows
-- pinned to it: a two-phase run is a shard's first, of fresh rows): target, biz_ids (text[]) in
-- id order, ctids (tid[]: where each locked row is, for the move; the version the lock took,
-- which a later statement of this transaction sees, and which nothing else can change while the
-- lock holds), payloads (jsonb[], NULL unless $6), trace_parents (text[] or NULL, as
-- external_claim.sql's), the lateness per distinct due time at this statement's start
-- (lateness_ms int4[], lateness_n int4[], measured_ms) and at_ms (the database clock at its end,
-- epoch ms).
WITH ours AS MATERIALIZED (
  -- a shard's first claim, and none of a split's halves (their rows are pinned to them,
  -- dispatched: split_pinned.sql): those run commit first, which takes their rows
  SELECT sh.target FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $4 AND sh.state = 'running' AND sh.claimed_at IS NULL
     AND NOT EXISTS (SELECT 1 FROM timeout_center.timeouts p WHERE p.shard_id = $1 AND p.state = 'dispatched')
), busy AS MATERIALIZED (
  SELECT unnest(o.held_ids) AS id FROM timeout_center.shards o
   WHERE o.kind = $2 AND o.held_ids IS NOT NULL AND o.state IN ('queued', 'running') AND o.id <> $1
     AND EXISTS (SELECT 1 FROM ours)
), fresh AS MATERIALIZED (
  SELECT d.id, d.ctid, d.biz_id, d.payload, d.due_at, d.trace_parent FROM timeout_center.timeouts d
   WHERE d.kind = $2::timeout_center.kind AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     AND (d.available_at, d.id) >= (coalesce((SELECT s.claim_floor FROM timeout_center.shards s WHERE s.id = $1), '-infinity'),
                                    coalesce((SELECT s.claim_floor_id FROM timeout_center.shards s WHERE s.id = $1), 0)) -- the shard's claim floor (sql/0030, 0041)
     AND (NOT $5::boolean OR d.target = (SELECT target FROM ours))
     AND d.id NOT IN (SELECT b.id FROM busy b)
     AND EXISTS (SELECT 1 FROM ours)
   ORDER BY d.available_at -- tc:claim-order (the newest-first form of a flood's shard)
   LIMIT $3
     FOR UPDATE SKIP LOCKED
), marked AS (
  UPDATE timeout_center.shards sh
     SET claimed_at = statement_timestamp(), held_ids = ARRAY(SELECT f.id FROM fresh f)
   WHERE sh.id = $1 AND EXISTS (SELECT 1 FROM ours)
), late AS (
  SELECT coalesce(array_agg(g.ms), '{}') AS lateness_ms, coalesce(array_agg(g.n), '{}') AS lateness_n
    FROM (SELECT (date_part('epoch', statement_timestamp() - k.due_at) * 1000)::int4 AS ms, count(*)::int AS n
            FROM fresh k GROUP BY k.due_at) g
)
SELECT (SELECT target FROM ours) AS target,
       coalesce(array_agg(r.biz_id), '{}') AS biz_ids,
       coalesce(array_agg(r.ctid), '{}') AS ctids,
       CASE WHEN $6::boolean THEN coalesce(array_agg(r.payload), '{}') END AS payloads,
       (SELECT array_agg(l.trace_parent) FROM (SELECT DISTINCT trace_parent FROM fresh WHERE trace_parent IS NOT NULL LIMIT 32) l) AS trace_parents,
       (SELECT lateness_ms FROM late) AS lateness_ms, (SELECT lateness_n FROM late) AS lateness_n,
       date_part('epoch', statement_timestamp()) * 1000 AS measured_ms,
       date_part('epoch', clock_timestamp()) * 1000 AS at_ms
  FROM (SELECT biz_id, ctid, payload FROM fresh ORDER BY id) r
HAVING EXISTS (SELECT 1 FROM ours)
