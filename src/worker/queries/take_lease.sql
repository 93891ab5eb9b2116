-- take_lease: a worker takes a shard: queued, or running under a lease that ran out. Committed on
-- its own so the shard shows as running (owner, lease, attempts) while the worker works on it.
-- A running shard whose lease ran out after its kind's max attempts is not taken again.
-- SKIP LOCKED: a shard whose row is locked is being run (its transaction holds lock_shard) or
-- requeued right now; a duplicate delivery must not wait for that transaction with a worker slot
-- and a pool connection. It returns at once with no row, and the delivery is acknowledged; if
-- that run then fails, the reaper requeues and republishes the shard.
--   $1 shard id   $2 worker id   $3 lease (ms)
-- No row: the shard is final or another worker holds it (a duplicate delivery: acknowledge it).
UPDATE timeout_center.shards
   SET state = 'running', owner = $2, lease_token = gen_random_uuid(), attempts = attempts + 1,
       lease_expires_at = now() + $3 * interval '1 millisecond', started_at = now()
 WHERE id = (SELECT s.id FROM timeout_center.shards s
              WHERE s.id = $1
                AND (s.state = 'queued'
                     OR (s.state = 'running' AND s.lease_expires_at < now()
                         -- out of attempts: the reaper abandons it (abandon_shards.sql), no new run
                         AND s.attempts < (SELECT k.max_attempts FROM timeout_center.kinds k WHERE k.kind = s.kind)))
                FOR UPDATE SKIP LOCKED)
RETURNING id, scan_id, kind, lease_token, attempts, claim_limit
