-- lock_scan: first statement of a split (isolate.ts, before split_pinned.sql): the scan row lock
-- serialises splits of one scan, so each sees the others' new shards' seq numbers.
--   $1 scan id
-- @params scanId: number
SELECT 1 FROM timeout_center.scans WHERE id = $1 FOR UPDATE
