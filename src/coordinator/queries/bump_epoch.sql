-- bump_epoch: a coordinator that won the Redis lock takes the fencing epoch (leadership.ts): every
-- write of an earlier leader fails on it from now on (fence_check.sql).
--   $1 coordinator id
-- @params coordinatorId: string
-- Returns the new epoch; no row: the lease row is missing (not migrated).
UPDATE timeout_center.coordinator_lease SET epoch = epoch + 1, holder = $1, acquired_at = now()
 WHERE id = 1 RETURNING epoch
