-- pin: only when a shard runs again after its worker died or overran the lease (attempts > 1).
-- Before applying anything, the re-run fixes which due timeouts it holds (pending -> dispatched,
-- with this shard) and commits that on its own. If this worker dies too, the next run applies the
-- same rows (claim.sql's `pinned` part), and after the kind's max attempts the reaper fails the shard with
-- exactly these rows (abandon_shards.sql): a row that kills workers cannot pass from shard to
-- shard forever. The first run of a shard never pins (one write per timeout). No-op when the
-- shard already holds pinned rows or the lease is no longer ours.
-- The rows are the ones the claim's fresh part would take (claim_fresh_oldest, sql/0052): due,
-- oldest first from the shard's claim floor, locked (SKIP LOCKED), read in key order whatever the
-- row estimate. Read from the kind's first entry, a re-run under an old snapshot held elsewhere
-- walked every timeout claimed since the snapshot began (60,603 entries for 500 rows in
-- claim-floor.test.ts), at the moment a worker had just died.
--   $1 shard id   $2 kind   $3 claim limit   $4 lease token
-- @params shardId: number, kind: string, claimLimit: number, leaseToken: string
-- Returns how many rows it pinned.
WITH ours AS (
  SELECT 1 FROM timeout_center.shards WHERE id = $1 AND lease_token = $4 AND state = 'running'
), held AS (
  SELECT 1 FROM timeout_center.timeouts WHERE shard_id = $1 AND state = 'dispatched' LIMIT 1
), pinned AS (
  UPDATE timeout_center.timeouts t
     SET state = 'dispatched', shard_id = $1
   WHERE t.id = ANY (ARRAY(SELECT f.id FROM timeout_center.claim_fresh_oldest($1, $2, $3) f))
     AND t.state = 'pending'
     AND EXISTS (SELECT 1 FROM ours) AND NOT EXISTS (SELECT 1 FROM held)
  RETURNING t.id
)
SELECT count(*)::int AS pinned FROM pinned
