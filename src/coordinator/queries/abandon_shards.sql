-- abandon_shards: a shard whose lease ran out and that already had its kind's max attempts (its
-- worker died or overran the lease every time) fails with its remaining timeouts, so a shard that
-- kills workers cannot loop forever. Its timeouts are the ones it pinned on its first re-run
-- (worker/queries/pin.sql); rows it never pinned went back to pending when its worker died. An
-- external shard's are also the pending ones its claim holds (shards.held_ids, sql/0020): its
-- run may have applied them in the business database.
--   $1 max shards
--   $2 the oldest shard id in flight (claim-floors.ts; sql/0042): the shards below it are final
-- @params maxShards: number, shardsFrom: number
-- Returns the failed shards (id, kind, scan_id, failed_count).
WITH doomed AS (
  SELECT sh.id, sh.attempts, sh.held_ids
    FROM timeout_center.shards sh JOIN timeout_center.kinds k ON k.kind = sh.kind
   WHERE sh.state = 'running' AND sh.lease_expires_at < now() AND sh.attempts >= k.max_attempts AND sh.id >= $2
   ORDER BY sh.id
   LIMIT $1
     FOR UPDATE OF sh SKIP LOCKED
), failed_rows AS (
  UPDATE timeout_center.timeouts t
     SET state = 'failed', attempts = t.attempts + 1, finished_at = now(), shard_id = d.id,
         last_error = format('shard %s abandoned after %s attempts: each time its worker died or overran the lease', d.id, d.attempts)
    FROM doomed d
   WHERE ((t.shard_id = d.id AND t.state = 'dispatched') OR (t.id = ANY (d.held_ids) AND t.state = 'pending'))
     -- a one-time gate: with no shard doomed (nearly every tick) the timeouts are not read at all,
     -- whichever side of the join the planner puts them (with a row or two in the statistics it
     -- read all of timeouts_one_live_per_biz first: every version a held snapshot keeps)
     AND EXISTS (SELECT 1 FROM doomed)
  RETURNING d.id AS shard_id
), counts AS (
  SELECT shard_id, count(*)::int AS n FROM failed_rows GROUP BY shard_id
)
UPDATE timeout_center.shards sh
   SET state = 'failed', finished_at = now(), lease_expires_at = NULL, size = coalesce(c.n, 0), held_ids = NULL,
       done_count = 0, skipped_count = 0, retried_count = 0, failed_count = coalesce(c.n, 0),
       error_sample = format('abandoned after %s attempts: each time its worker died or overran the lease', d.attempts)
  FROM doomed d LEFT JOIN counts c ON c.shard_id = d.id
 WHERE sh.id = d.id
RETURNING sh.id, sh.kind, sh.scan_id, sh.failed_count
