-- take_lease, Citus form: take_lease.sql returning the shard's bucket too (shards.bucket, set by
-- the Citus map), and never from_newest: the newest-first claim reads the shard's not_before from
-- the shards table inside the claim, which Citus would plan apart from the router query (shards
-- of one bucket do not overlap anyway: a flood's shards are spread over the buckets).
-- Keep in step with take_lease.sql.
-- take_lease: a worker takes a shard: queued, or running under a lease that ran out. Committed on
-- its own so the shard shows as running (owner, lease, attempts) while the worker works on it.
-- A running shard whose lease ran out after its kind's max attempts is not taken again.
-- SKIP LOCKED: a shard whose row is locked is being run (its transaction holds lock_shard) or
-- requeued right now; a duplicate delivery must not wait for that transaction with a worker slot
-- and a pool connection. It returns at once with no row, and the delivery is acknowledged; if
-- that run then fails, the reaper requeues and republishes the shard.
--   $1 shard id   $2 worker id   $3 lease (ms)
-- @params shardId: number, workerId: string, leaseMs: number
-- Flow control (sql/0006): nothing of a paused kind starts, and a capped kind never has more
-- than max_running_shards running (a cap lowered while shards are queued); the check runs after
-- lock_kind.sql, in the same transaction, so two workers cannot both take the last place.
-- wait_ms: a shard planned ahead of its rows' due instant (shards.not_before, sql/0011) is leased
-- early; the worker waits this long, measured here on the database clock, before it claims. Rounded
-- up, so the claim's statement_timestamp() is past not_before.
-- from_newest: every other shard of a flood mapped ahead claims the flood's newest rows first
-- (claim.sql), so two shards running side by side start from opposite ends.
-- No row: the shard is final, another worker holds it (a duplicate delivery: acknowledge it), or
-- flow control holds it back (hold_shard.sql then leaves it queued, unpublished).
UPDATE timeout_center.shards sh
   SET state = 'running', owner = $2, lease_token = gen_random_uuid(), attempts = sh.attempts + 1,
       lease_expires_at = now() + $3 * interval '1 millisecond', started_at = now()
  FROM timeout_center.kinds k
 WHERE sh.id = (SELECT s.id FROM timeout_center.shards s
                 WHERE s.id = $1
                   AND (s.state = 'queued'
                        OR (s.state = 'running' AND s.lease_expires_at < now()
                            -- out of attempts: the reaper abandons it (abandon_shards.sql), no new run
                            AND s.attempts < (SELECT k2.max_attempts FROM timeout_center.kinds k2 WHERE k2.kind = s.kind)))
                   FOR UPDATE SKIP LOCKED)
   AND k.kind = sh.kind AND NOT k.paused
   AND (k.max_running_shards IS NULL OR sh.state = 'running'
        OR (SELECT count(*) FROM timeout_center.shards r WHERE r.kind = sh.kind AND r.state = 'running') < k.max_running_shards)
RETURNING sh.id, sh.scan_id, sh.kind, sh.bucket, sh.lease_token, sh.attempts, sh.claim_limit,
          greatest(ceil(extract(epoch FROM sh.not_before - clock_timestamp()) * 1000), 0)::int AS wait_ms,
          false AS from_newest,
          sh.claim_attempt > 0 AS suspect
