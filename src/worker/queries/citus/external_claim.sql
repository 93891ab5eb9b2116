-- external_claim, Citus form (src/db/citus-layout.ts; docs/scale.md "Citus: what runs"): the
-- timeouts part of external_claim.sql, every read and write limited to the shard's bucket ($5), so
-- Citus runs it on the one worker node holding that bucket (a router query: the only kind that may
-- lock rows). The shard's row (external_claim.sql's `ours` and `marked`) is read, locked and marked
-- by citus/worker/external_claim_shard.sql first, in the same transaction, which passes its `fresh`
-- here ($4: the lease was checked there, under the row's lock).
-- What differs from one PostgreSQL: the first claim writes its rows as dispatched with the shard
-- (the second write a re-run makes on one PostgreSQL), instead of holding them pending, unwritten,
-- in shards.held_ids. A held row is protected from a payer's cancel or reschedule by a row trigger
-- on timeouts that reads shards (sql/0020's timeouts_refuse_held_change), and on Citus that trigger
-- would run on the worker nodes, where shards is not: the layout drops it (sql/citus/layout.sql). A
-- dispatched row needs no trigger: a cancel or reschedule changes only pending rows (0012's rule),
-- so "the shard may be closing this order right now" holds on Citus too. The cost: one more write
-- per timeout on the Citus center (claim, then record). held_ids stays NULL, so no other claim
-- needs the ids other shards hold (external_claim.sql's `busy`) nor a give-back (external_unhold.sql):
-- FOR UPDATE SKIP LOCKED and `state = 'pending'` keep two shards' rows apart.
-- Keep in step with external_claim.sql.
-- external_claim: the claim of the external path (a handler that runs outside the center's
-- database: a business database, an HTTP service, a code handler), committed before the handler
-- is called, so no timeout row stays locked across a call to another database or service (a
-- payer's cancel waits at most for this transaction).
-- A re-run of the shard (its worker died, or the lease ran out) takes the rows it holds (its
-- dispatched rows: claimed by its first run, or handed to it by the split of a shard that ran
-- again after its worker died, split_pinned.sql) and never claims fresh ones, even when it holds
-- none any more (shards.claimed_at is set by the first claim): the marker in the target database
-- says what an earlier run did with its rows, and a fresh row recorded from that marker would be
-- recorded as something it never was.
--   $1 shard id   $2 kind   $3 claim limit
--   $4 fresh: the shard's first claim (citus/worker/external_claim_shard.sql)   $5 the shard's bucket
--   $6 routed: only the rows whose target (timeouts.target, stamped by the kind's routing rule
--      when the row was written: sql/0020, sql/citus/routes.sql) is the shard's (boolean)
--   $7 the shard's target (citus/worker/external_claim_shard.sql; NULL for a kind without a rule)
-- @params shardId: number, kind: string, claimLimit: number, fresh: boolean, bucket: number, routed: boolean,
-- @params target: string | null
-- Returns one row: ids (bigint[]), biz_ids (text[]), payloads (jsonb[]), trace_parents (as
-- external_claim.sql's); the arrays are NULL when the claim took no row.
WITH pinned AS MATERIALIZED (
  -- The shard's dispatched rows: claimed by an earlier run of it, or handed to it by a split.
  SELECT h.id, h.biz_id, h.payload, h.due_at, h.trace_parent FROM timeout_center.timeouts h
   WHERE h.bucket = $5 AND h.shard_id = $1 AND h.state = 'dispatched'
), fresh AS MATERIALIZED (
  SELECT d.id FROM timeout_center.timeouts d
   WHERE d.bucket = $5 AND d.kind = $2::timeout_center.kind AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     -- the row's target, stamped when it was written: a routed claim reads only its own target's
     -- due rows of the bucket
     AND (NOT $6::boolean OR d.target = $7::text)
     AND $4::boolean AND NOT EXISTS (SELECT 1 FROM pinned)
   ORDER BY d.available_at
   LIMIT $3
     FOR UPDATE SKIP LOCKED
), taken AS (
  -- The first claim's one write of each row in the center before its record: dispatched, with
  -- the shard, its attempt counted (as external_claim.sql's taken_back).
  UPDATE timeout_center.timeouts t
     SET state = 'dispatched', shard_id = $1, attempts = t.attempts + 1
   WHERE t.bucket = $5 AND t.id = ANY (ARRAY(SELECT f.id FROM fresh f)) AND t.state = 'pending'
  RETURNING t.id, t.biz_id, t.payload, t.due_at, t.trace_parent
), rows AS MATERIALIZED (
  SELECT * FROM pinned UNION ALL SELECT * FROM taken
)
SELECT array_agg(r.id) AS ids,
       array_agg(r.biz_id) AS biz_ids,
       array_agg(r.payload) AS payloads,
       (SELECT array_agg(l.trace_parent) FROM (SELECT DISTINCT trace_parent FROM rows WHERE trace_parent IS NOT NULL LIMIT 32) l) AS trace_parents
  FROM (SELECT * FROM rows ORDER BY id) r
