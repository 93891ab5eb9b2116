-- external_record_lock, Citus only: the first statement of the external record on the Citus
-- layout (docs/scale.md "Citus: what runs"), on the coordinator: the shard's row under this run's
-- lease, locked FOR UPDATE until the transaction ends (external_record.sql's `ours`), so no
-- requeue, reaper or other run changes the lease while citus/worker/external_record.sql writes the
-- shard's rows in its bucket and citus/worker/external_close_shard.sql closes the shard (Citus runs
-- no FOR UPDATE in a query that also writes distributed tables).
--   $1 shard id   $2 lease token
-- @params shardId: number, leaseToken: string
-- Returns the shard's id; no row when the lease is no longer ours (nothing is recorded then).
SELECT sh.id FROM timeout_center.shards sh
 WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
   FOR UPDATE
