-- bump_epoch: a coordinator that won the Redis lock takes the fencing epoch (leadership.ts): every
-- write of an earlier leader fails on it from now on (fence_check.sql).
-- The new epoch is the greater of epoch + 1 and the database clock in milliseconds, so it never
-- goes back to one already handed out: after a failover to an asynchronous standby that had not
-- received the last bump, epoch + 1 from the surviving row would give the next leader the lost
-- leader's number and both would pass the fence; the clock has moved on since (docs/reliability.md,
-- "What asynchronous replication can lose"). Assumes the servers' clocks agree to within the time
-- between two elections.
--   $1 coordinator id
-- @params coordinatorId: string
-- Returns the new epoch; no row: the lease row is missing (not migrated).
UPDATE timeout_center.coordinator_lease
   SET epoch = greatest(epoch + 1, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), holder = $1, acquired_at = now()
 WHERE id = 1 RETURNING epoch
