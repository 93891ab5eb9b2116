-- expire_gone: the leases held by a gone worker (no heartbeat within $1 ms, or stopped:
-- timeout_center.worker_gone, sql/0018) end now, whatever their expiry said, so that the reaper's
-- next steps in the same transaction (abandon_shards.sql, requeue_expired.sql) hand the shards on
-- within the bound instead of after worker.leaseMs. SKIP LOCKED: a shard whose transaction is
-- open holds its row (lock_shard.sql), so a worker that is only frozen (SIGSTOP) inside it keeps
-- the shard and commits it once it wakes; one frozen between transactions loses its lease, and
-- its late writes are refused by the lease token (lock_shard.sql, renew_lease.sql).
--   $1 gone after (ms)   $2 max shards
--   $3 the oldest shard id in flight (claim-floors.ts; sql/0042): the shards below it are final
-- @params goneAfterMs: number, maxShards: number, shardsFrom: number
-- Returns (id, owner) of each shard whose lease it ended.
UPDATE timeout_center.shards sh
   SET lease_expires_at = now() - interval '1 millisecond'
 WHERE sh.id IN (SELECT s.id FROM timeout_center.shards s
                  WHERE s.state = 'running' AND s.lease_expires_at >= now() AND s.id >= $3
                    AND timeout_center.worker_gone(s.owner, $1)
                  ORDER BY s.id
                  LIMIT $2
                    FOR UPDATE SKIP LOCKED)
RETURNING sh.id, sh.owner
