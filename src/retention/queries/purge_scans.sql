-- purge_scans: deletes up to $2 reduced scans whose reduce is more than $1 ms old; their shards go
-- with them (ON DELETE CASCADE, through the shards' (scan_id, kind, seq) index). A scan is kept
-- while failed timeouts of its shards remain, so `failed` and `retry --scan` keep their context.
--   $1 age (ms)   $2 batch size (scans; each may carry many shards)
-- @params ageMs: number, batchSize: number
-- Returns nothing; the row count is the number of scans deleted.
DELETE FROM timeout_center.scans s
 WHERE s.id IN (SELECT c.id FROM timeout_center.scans c
                 WHERE c.state = 'reduced'
                   AND c.reduced_at < now() - $1 * interval '1 millisecond'
                   AND (coalesce(c.failed, 0) = 0
                        OR NOT EXISTS (SELECT 1 FROM timeout_center.shards sh
                                         JOIN timeout_center.timeouts t ON t.shard_id = sh.id AND t.state = 'failed'
                                        WHERE sh.scan_id = c.id))
                 ORDER BY c.reduced_at
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED)
