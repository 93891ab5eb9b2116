-- external_claim_lock: runs just before external_claim.sql, in its transaction. Claims of the same
-- kind and target pass one at a time: each claim, a statement later, reads the ids the other
-- shards hold with every earlier claim's commit visible (READ COMMITTED takes a new snapshot per
-- statement). Without it, two claims that ran side by side each locked rows the other took and
-- committed meanwhile (a claim only locks the rows it holds, and their locks end at its commit),
-- and external_unhold.sql gave them back: the later shard left with a few hundred of its 5,000
-- rows, and the rest waited for another plan, 80-90 ms later in a flood (docs/benchmarks.md,
-- "The sixth pass"). It also orders a re-run's take-back (external_claim.sql taken_back), which
-- checks the lease only when its statement begins: a later run of the shard, leased after that
-- lease ran out, claims after its commit and takes the rows as the shard's; without the lock it
-- would find them locked, take nothing, and its record return them to pending for the next scan
-- (test/integration/external-claim-lease-race.test.ts). external_unhold.sql stays, for a settle
-- on read (sql/0023) that binds a row while a claim runs. A transaction-level advisory lock: no
-- row written, gone at the claim's COMMIT.
--   $1 shard id
-- @params shardId: number
SELECT pg_advisory_xact_lock(hashtextextended('timeout-center external claim ' || sh.kind || ' ' || coalesce(sh.target, ''), 0))
  FROM timeout_center.shards sh WHERE sh.id = $1
