-- fence_check: the first statement of every coordinator write (fence.ts fencedTransaction). Locks
-- the lease row FOR SHARE and returns its epoch and holder; the caller refuses to write unless the
-- epoch is its own. A takeover's epoch bump (bump_epoch.sql) waits for the fenced transactions in
-- flight, and every later one sees the new epoch.
SELECT epoch, holder FROM timeout_center.coordinator_lease WHERE id = 1 FOR SHARE
