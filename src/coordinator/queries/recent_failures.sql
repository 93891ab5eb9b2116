-- recent_failures: the failed totals of the latest reduced scans, newest first (reduce.ts counts
-- how many in a row had failures, for the repeated-failures alert).
--   $1 how many scans
-- @params limit: number
SELECT failed FROM timeout_center.scans WHERE state = 'reduced' ORDER BY reduced_at DESC, id DESC LIMIT $1
