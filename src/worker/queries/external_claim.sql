-- external_claim: the claim of the external path (a handler that runs outside the center's
-- database: a business database, an HTTP service, a code handler), committed on its own before
-- the handler is called, so no timeout row stays locked across a call to another database or
-- service (a payer's cancel waits at most for this statement). Marks up to the shard's limit of
-- due pending timeouts of its kind and target dispatched, with this shard (the second write per
-- timeout, only on this path; external_record.sql writes the outcome). A re-run of the shard
-- (its worker died, or the lease ran out) takes back exactly the rows it holds already and never
-- claims fresh ones, even when it holds none any more (shards.claimed_at is set by the first
-- claim): the marker in the target database says what an earlier run did with its rows, and a
-- fresh row recorded from that marker would be recorded as something it never was.
--   $1 shard id   $2 kind   $3 claim limit   $4 lease token
--   $5 routed: filter by the kind's routing rule (timeout_center.route_target) = the shard's
--      target (boolean)
-- @params shardId: number, kind: string, claimLimit: number, leaseToken: string, routed: boolean
-- Returns one row: target (the shard's), ids (bigint[]), biz_ids (text[]), payloads (jsonb[]),
-- lateness in s (float8[]), fresh (this is the shard's first claim: no earlier run of it can have
-- applied anything), measured_ms (the instant the lateness is measured at, epoch ms: the worker
-- moves it to the record's, external_record.sql at_ms); no row when the lease is no longer ours.
WITH route AS MATERIALIZED (
  SELECT r.route_by, r.databases, r.range_from, r.range_to FROM timeout_center.kind_routes r WHERE r.kind = $2
), ours AS MATERIALIZED (
  SELECT sh.target, sh.claimed_at FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $4 AND sh.state = 'running'
), held AS MATERIALIZED (
  SELECT h.id, h.biz_id, h.payload, h.due_at FROM timeout_center.timeouts h
   WHERE h.shard_id = $1 AND h.state = 'dispatched' AND EXISTS (SELECT 1 FROM ours)
), fresh AS MATERIALIZED (
  SELECT d.id FROM timeout_center.timeouts d
   WHERE d.kind = $2::timeout_center.kind AND d.state = 'pending' AND d.available_at <= statement_timestamp()
     -- routes_to, not route_target(...) = target: the planner must expect many matches to walk the
     -- due index in order instead of reading and sorting the whole backlog (sql/0016).
     AND (NOT $5::boolean
          OR timeout_center.routes_to((SELECT route_by FROM route), (SELECT databases FROM route), (SELECT range_from FROM route),
                                      (SELECT range_to FROM route), d.biz_id, (SELECT target FROM ours)))
     AND EXISTS (SELECT 1 FROM ours WHERE claimed_at IS NULL) AND NOT EXISTS (SELECT 1 FROM held)
   ORDER BY d.available_at
   LIMIT $3
     FOR UPDATE SKIP LOCKED
), claimed AS (
  UPDATE timeout_center.timeouts t
     SET state = 'dispatched', shard_id = $1, attempts = t.attempts + 1
   WHERE t.id = ANY (ARRAY(SELECT id FROM fresh)) AND t.state = 'pending'
  RETURNING t.id, t.biz_id, t.payload, t.due_at
), first_claim AS (
  UPDATE timeout_center.shards sh SET claimed_at = statement_timestamp()
   WHERE sh.id = $1 AND sh.claimed_at IS NULL AND EXISTS (SELECT 1 FROM ours)
), rows AS (
  SELECT * FROM held UNION ALL SELECT * FROM claimed
)
SELECT (SELECT target FROM ours) AS target,
       coalesce(array_agg(r.id ORDER BY r.id), '{}') AS ids,
       coalesce(array_agg(r.biz_id ORDER BY r.id), '{}') AS biz_ids,
       coalesce(array_agg(r.payload ORDER BY r.id), '{}') AS payloads,
       coalesce(array_agg(extract(epoch FROM statement_timestamp() - r.due_at)::float8 ORDER BY r.id), '{}') AS lateness,
       (SELECT claimed_at IS NULL FROM ours) AS fresh,
       date_part('epoch', statement_timestamp()) * 1000 AS measured_ms
  FROM rows r
HAVING EXISTS (SELECT 1 FROM ours)
