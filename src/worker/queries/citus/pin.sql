-- pin, Citus form: pin.sql within the shard's bucket ($5), a router query (see citus/claim.sql).
-- Keep in step with pin.sql.
-- pin: only when a shard runs again after its worker died or overran the lease (attempts > 1).
-- Before applying anything, the re-run fixes which due timeouts it holds (pending -> dispatched,
-- with this shard) and commits that on its own. If this worker dies too, the next run applies the
-- same rows (claim.sql's `pinned` part), and after the kind's max attempts the reaper fails the shard with
-- exactly these rows (abandon_shards.sql): a row that kills workers cannot pass from shard to
-- shard forever. The first run of a shard never pins (one write per timeout). No-op when the
-- shard already holds pinned rows or the lease is no longer ours.
--   $1 shard id   $2 kind   $3 claim limit   $4 lease token   $5 the shard's bucket
-- @params shardId: number, kind: string, claimLimit: number, leaseToken: string, bucket: number
-- Returns how many rows it pinned.
WITH ours AS (
  SELECT 1 FROM timeout_center.shards WHERE id = $1 AND lease_token = $4 AND state = 'running'
), held AS (
  SELECT 1 FROM timeout_center.timeouts WHERE bucket = $5 AND shard_id = $1 AND state = 'dispatched' LIMIT 1
), pinned AS (
  UPDATE timeout_center.timeouts t
     SET state = 'dispatched', shard_id = $1
   WHERE t.bucket = $5 AND t.id = ANY (ARRAY(SELECT d.id FROM timeout_center.timeouts d
                   WHERE d.bucket = $5 AND d.kind = $2 AND d.state = 'pending' AND d.available_at <= statement_timestamp()
                   ORDER BY d.available_at
                   LIMIT $3
                     FOR UPDATE SKIP LOCKED))
     AND t.state = 'pending'
     AND EXISTS (SELECT 1 FROM ours) AND NOT EXISTS (SELECT 1 FROM held)
  RETURNING t.id
)
SELECT count(*)::int AS pinned FROM pinned
