-- close_orphan_scans: a scan still 'mapping' under an older epoch belongs to a coordinator that
-- died or was fenced off mid-map. Its counters are exact (each claim updated them in the same
-- statement), so it only needs marking mapped to be reduced.
--   $1 current epoch
UPDATE timeout_center.scans SET state = 'mapped', mapped_at = now()
 WHERE state = 'mapping' AND epoch < $1
RETURNING id
