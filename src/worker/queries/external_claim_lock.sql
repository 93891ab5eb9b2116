-- external_claim_lock: runs just before external_claim.sql, in its transaction. Claims of the same
-- kind, target and end of the due rows (oldest or newest first) pass one at a time: each claim,
-- a statement later, reads the ids the other shards hold with every earlier claim's commit
-- visible (READ COMMITTED takes a new snapshot per statement). Without it, two claims that ran
-- side by side each locked rows the other took and committed meanwhile (a claim only locks the
-- rows it holds, and their locks end at its commit), and external_unhold.sql gave them back: the
-- later shard left with a few hundred of its 5,000 rows, and the rest waited for another plan
-- (docs/benchmarks.md, "The sixth pass"). Claims from the two ends still run side by side; where
-- they meet, external_unhold.sql keeps any row to one shard. A transaction-level advisory lock:
-- no row written, gone at the claim's COMMIT.
--   $1 shard id   $2 newest first (boolean: take_lease.sql from_newest)
-- @params shardId: number, newestFirst: boolean
SELECT pg_advisory_xact_lock(hashtextextended('timeout-center external claim ' || sh.kind || ' ' || coalesce(sh.target, '') || ' ' || $2::boolean::text, 0))
  FROM timeout_center.shards sh WHERE sh.id = $1
