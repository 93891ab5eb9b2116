-- take_lease: a worker takes a shard: queued, or running under a lease that ran out. Committed on
-- its own so the shard shows as running (owner, lease, attempts) while the worker works on it.
--   $1 shard id   $2 worker id   $3 lease (ms)
-- No row: the shard is final or another worker holds it (a duplicate delivery: acknowledge it).
UPDATE timeout_center.shards
   SET state = 'running', owner = $2, lease_token = gen_random_uuid(), attempts = attempts + 1,
       lease_expires_at = now() + $3 * interval '1 millisecond', started_at = now()
 WHERE id = $1 AND (state = 'queued' OR (state = 'running' AND lease_expires_at < now()))
RETURNING id, scan_id, kind, lease_token, attempts, claim_limit
