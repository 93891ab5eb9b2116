-- external_claim: the claim of the external path (a handler that runs outside the center's
-- database: a business database, an HTTP service, a code handler), committed before the handler
-- is called, so no timeout row stays locked across a call to another database or service (a
-- payer's cancel waits at most for this statement). The first claim of a shard writes no
-- timeout: it locks up to the shard's limit of due pending timeouts of its kind and target that
-- no other live shard holds, and writes their ids into the shard's row (shards.held_ids,
-- sql/0020); they stay pending, and the record (external_record.sql) is their one write. While
-- the shard holds them no other claim takes them and a cancel of them is refused (sql/0020's
-- trigger). Runs in one transaction with external_unhold.sql, which gives back what another
-- shard's claim took first.
-- A re-run of the shard (its worker died, or the lease ran out) takes back exactly the rows it
-- holds, now as dispatched rows of the shard (the second write, on a re-run only: the isolation
-- split and the abandon work on those), and never claims fresh ones, even when it holds none any
-- more (shards.claimed_at is set by the first claim): the marker in the target database says
-- what an earlier run did with its rows, and a fresh row recorded from that marker would be
-- recorded as something it never was.
--   $1 shard id   $2 kind   $3 claim limit   $4 lease token
--   $5 routed: only the rows whose target (timeouts.target, stamped by the kind's routing rule
--      when the row was written: sql/0020) is the shard's (boolean)
--   $6 payloads: the handler reads them (a code or HTTP handler, or a SQL handler with $2); else
--      none are sent (boolean)
-- @params shardId: number, kind: string, claimLimit: number, leaseToken: string, routed: boolean, payloads: boolean
-- @slot claimOrder tc:claim-order
-- Every other shard of a flood mapped ahead (take_lease.sql from_newest) claims the newest rows
-- due by the flood's instant first (the slot's newest-first line, sql-handler.ts NEWEST_FIRST, as
-- claim.sql's): the rows other running shards hold stay pending and in the due index until their
-- record, and a claim walks past each of them; from two ends, each walks past half as many.
-- Returns one row: target (the shard's), biz_ids (text[]), payloads (jsonb[], NULL unless $6),
-- fresh (this is the shard's first claim: no earlier run of it can have applied anything),
-- trace_parents (text[], NULL when none: up to 32 distinct schedule trace contexts of the rows,
-- sql/0022, which the shard's span links to, as claim.sql's); no row when the lease is no longer
-- ours. The rows' lateness is the record's to measure (external_record.sql), once they are closed.
WITH ours AS MATERIALIZED (
  SELECT sh.target, sh.claimed_at, sh.held_ids FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $4 AND sh.state = 'running'
), taken_back AS (
  -- A re-run: the rows its first run held, still pending, become the shard's dispatched rows.
  UPDATE timeout_center.timeouts t
     SET state = 'dispatched', shard_id = $1, attempts = t.attempts + 1
   WHERE t.id = ANY (coalesce((SELECT o.held_ids FROM ours o WHERE o.claimed_at IS NOT NULL), '{}'::bigint[])) AND t.state = 'pending'
  RETURNING t.id, t.biz_id, t.payload, t.due_at, t.trace_parent
), pinned AS MATERIALIZED (
  -- The shard's dispatched rows: taken back by an earlier re-run, or handed to it by the split of
  -- a shard that ran again after its worker died (split_pinned.sql).
  SELECT h.id, h.biz_id, h.payload, h.due_at, h.trace_parent FROM timeout_center.timeouts h
   WHERE h.shard_id = $1 AND h.state = 'dispatched' AND EXISTS (SELECT 1 FROM ours)
), busy AS MATERIALIZED (
  -- The ids the kind's other live shards hold (a few shards, a few thousand ids).
  SELECT unnest(o.held_ids) AS id FROM timeout_center.shards o
   WHERE o.kind = $2 AND o.held_ids IS NOT NULL AND o.state IN ('queued', 'running') AND o.id <> $1
     AND EXISTS (SELECT 1 FROM ours WHERE claimed_at IS NULL) AND NOT EXISTS (SELECT 1 FROM pinned)
), fresh AS MATERIALIZED (
  SELECT d.id, d.biz_id, d.payload, d.due_at, d.trace_parent FROM timeout_center.timeouts d
   WHERE d.kind = $2::timeout_center.kind AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     AND (d.available_at, d.id) >= (coalesce((SELECT s.claim_floor FROM timeout_center.shards s WHERE s.id = $1), '-infinity'),
                                    coalesce((SELECT s.claim_floor_id FROM timeout_center.shards s WHERE s.id = $1), 0)) -- the shard's claim floor (sql/0030, 0041)
     -- the row's target, stamped when it was written (sql/0020): a routed claim walks its own
     -- target's due rows on timeouts_due_by_target and never reads another target's
     AND (NOT $5::boolean OR d.target = (SELECT target FROM ours))
     AND d.id NOT IN (SELECT b.id FROM busy b)
     AND EXISTS (SELECT 1 FROM ours WHERE claimed_at IS NULL) AND NOT EXISTS (SELECT 1 FROM pinned)
   ORDER BY d.available_at -- tc:claim-order (the newest-first form of a flood's shard)
   LIMIT $3
     FOR UPDATE SKIP LOCKED
), marked AS (
  -- The shard's first committed claim counts as its first attempt: earlier runs that left nothing
  -- committed (a two-phase run that died before its PREPARE rolled its claim back: two-phase.ts)
  -- are not counted, so a row that kills workers is isolated within the kind's attempts as on a
  -- first run (the second run takes the held rows back and splits them).
  UPDATE timeout_center.shards sh
     SET claimed_at = coalesce(sh.claimed_at, statement_timestamp()),
         attempts = CASE WHEN sh.claimed_at IS NULL THEN least(sh.attempts, 1) ELSE sh.attempts END,
         held_ids = CASE WHEN sh.claimed_at IS NULL AND NOT EXISTS (SELECT 1 FROM pinned) THEN ARRAY(SELECT f.id FROM fresh f) END
   WHERE sh.id = $1 AND EXISTS (SELECT 1 FROM ours)
), rows AS MATERIALIZED (
  SELECT * FROM pinned UNION ALL SELECT * FROM taken_back UNION ALL SELECT * FROM fresh
)
SELECT (SELECT target FROM ours) AS target,
       -- in id order, sorted once for both arrays (the subquery's order: PostgreSQL 15 sorts each
       -- `array_agg(... ORDER BY ...)` on its own)
       coalesce(array_agg(r.biz_id), '{}') AS biz_ids,
       CASE WHEN $6::boolean THEN coalesce(array_agg(r.payload), '{}') END AS payloads,
       (SELECT claimed_at IS NULL FROM ours) AS fresh,
       (SELECT array_agg(l.trace_parent) FROM (SELECT DISTINCT trace_parent FROM rows WHERE trace_parent IS NOT NULL LIMIT 32) l) AS trace_parents
  FROM (SELECT * FROM rows ORDER BY id) r
HAVING EXISTS (SELECT 1 FROM ours)
