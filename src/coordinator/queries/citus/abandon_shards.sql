-- abandon_shards, Citus form: abandon_shards.sql with the error texts made in doomed (Citus
-- refuses a STABLE function over columns in an UPDATE of a distributed table) and the failed
-- rows matched on the doomed shard's bucket too. Citus plans the doomed shards (coordinator rows,
-- locked there) first, then the UPDATE of their pinned rows as a multi-shard modification with
-- those rows as input; it locks no row by SELECT ... FOR UPDATE. Keep in step with abandon_shards.sql.
-- abandon_shards: a shard whose lease ran out and that already had its kind's max attempts (its
-- worker died or overran the lease every time) fails with its remaining timeouts, so a shard that
-- kills workers cannot loop forever. Its timeouts are the ones it pinned on its first re-run
-- (worker/queries/pin.sql); rows it never pinned went back to pending when its worker died.
--   $1 max shards
-- @params maxShards: number
-- Returns the failed shards (id, kind, scan_id, failed_count).
WITH doomed AS (
  SELECT sh.id, sh.attempts, sh.bucket,
         format('shard %s abandoned after %s attempts: each time its worker died or overran the lease', sh.id, sh.attempts) AS last_error,
         format('abandoned after %s attempts: each time its worker died or overran the lease', sh.attempts) AS error_sample
    FROM timeout_center.shards sh JOIN timeout_center.kinds k ON k.kind = sh.kind
   WHERE sh.state = 'running' AND sh.lease_expires_at < now() AND sh.attempts >= k.max_attempts
   ORDER BY sh.id
   LIMIT $1
     FOR UPDATE OF sh SKIP LOCKED
), failed_rows AS (
  UPDATE timeout_center.timeouts t
     SET state = 'failed', attempts = t.attempts + 1, finished_at = now(), last_error = d.last_error
    FROM doomed d
   WHERE t.bucket = d.bucket AND t.shard_id = d.id AND t.state = 'dispatched'
  RETURNING t.shard_id
), counts AS (
  SELECT shard_id, count(*)::int AS n FROM failed_rows GROUP BY shard_id
)
UPDATE timeout_center.shards sh
   SET state = 'failed', finished_at = now(), lease_expires_at = NULL, size = coalesce(c.n, 0),
       done_count = 0, skipped_count = 0, retried_count = 0, failed_count = coalesce(c.n, 0),
       error_sample = d.error_sample
  FROM doomed d LEFT JOIN counts c ON c.shard_id = d.id
 WHERE sh.id = d.id
RETURNING sh.id, sh.kind, sh.scan_id, sh.failed_count
