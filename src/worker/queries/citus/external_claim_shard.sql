-- external_claim_shard, Citus only: the first statement of the external claim's transaction on
-- the Citus layout (docs/scale.md "Citus: what runs"), on the coordinator, where shards lives: the
-- shard's row under this run's lease, locked (as the plain claim's UPDATE of it locks it) and
-- marked claimed (shards.claimed_at, set by the first claim only). Then citus/worker/external_claim.sql
-- claims in the shard's bucket, a router query on one worker node; the transaction commits both
-- (Citus refuses a query that locks or writes rows on a worker node and writes the coordinator's
-- shards in one statement). external_claim.sql's `ours` and `marked` parts, apart; held_ids is not
-- written: on Citus the claim writes its rows as dispatched (citus/worker/external_claim.sql says why).
--   $1 shard id   $2 lease token
-- @params shardId: number, leaseToken: string
-- Returns one row: target (the shard's), fresh (this is the shard's first claim); no row when the
-- lease is no longer ours (the transaction is then rolled back).
WITH ours AS MATERIALIZED (
  SELECT sh.id, sh.target, sh.claimed_at IS NULL AS fresh FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
     FOR NO KEY UPDATE
)
UPDATE timeout_center.shards sh
   SET claimed_at = coalesce(sh.claimed_at, statement_timestamp())
  FROM ours o
 WHERE sh.id = o.id
RETURNING o.target, o.fresh
