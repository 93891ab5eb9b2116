-- external_unhold: the second statement of the external claim's transaction (after
-- external_claim.sql, with a snapshot of its own). A claim reads the ids other shards hold with
-- the snapshot its statement started with, and may then lock a row that another shard's claim
-- took and committed meanwhile (that claim's row locks end at its commit). This statement sees
-- every claim that committed before its own shard's locks were taken, so it gives back the ids a
-- live shard of the kind held first: no two live shards ever hold the same timeout.
--   $1 shard id   $2 kind
-- @params shardId: number, kind: string
-- Returns one row: given_back (text[], the biz_ids of the rows this shard gives back; usually
-- empty: claims of a kind and target pass one at a time, external_claim_lock.sql, so only a row a
-- settle on read bound meanwhile, sql/0023, comes back here).
WITH ours AS MATERIALIZED (
  SELECT sh.held_ids FROM timeout_center.shards sh WHERE sh.id = $1 AND sh.held_ids IS NOT NULL
), taken AS MATERIALIZED (
  SELECT x.id FROM unnest((SELECT held_ids FROM ours)) AS x (id)
   WHERE x.id IN (SELECT unnest(o.held_ids) FROM timeout_center.shards o
                   WHERE o.kind = $2 AND o.held_ids IS NOT NULL AND o.state IN ('queued', 'running') AND o.id <> $1)
), given AS (
  UPDATE timeout_center.shards sh
     SET held_ids = ARRAY(SELECT x FROM unnest(sh.held_ids) x WHERE x NOT IN (SELECT id FROM taken))
   WHERE sh.id = $1 AND EXISTS (SELECT 1 FROM taken)
)
SELECT coalesce((SELECT array_agg(t.biz_id ORDER BY t.id) FROM timeout_center.timeouts t WHERE t.id IN (SELECT id FROM taken)), '{}') AS given_back
