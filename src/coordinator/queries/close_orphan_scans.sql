-- close_orphan_scans: only for scans written before migration 0003, when the map wrote a scan
-- 'mapping' first and its shards after: one still 'mapping' under an older epoch belongs to a
-- coordinator that died or was fenced off mid-map. Since 0003 a scan is written 'mapped' with all
-- its shards by one statement (plan_shards.sql), so none is left 'mapping'; reduce then totals it
-- from its shards as for any scan.
--   $1 current epoch
--   $2 the oldest scan not reduced (claim-floors.ts): the scans below it are reduced
-- @params epoch: number, scansFrom: number
UPDATE timeout_center.scans SET state = 'mapped', mapped_at = now()
 WHERE state = 'mapping' AND epoch < $1 AND id >= $2
RETURNING id
