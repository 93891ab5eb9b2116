-- external_two_phase_begin: first statement of a two-phase external run's center transaction
-- (external-executor.ts, runTwoPhase). Takes the shard's row under this run's lease, FOR KEY SHARE
-- as lock_shard.sql (the reaper, a drain's release and duplicate deliveries pass it by; the lease
-- keeper still renews it), and says whether the run may commit in two phases. It may not while a
-- shard of its kind runs again after its worker stopped (requeued, or leased a second time): the
-- rows that stopped it may be what kills workers, and a two-phase run that dies rolls back
-- everything, its attempt included. Those shards run commit first (the claim committed before the
-- handler), which counts each attempt and splits the rows until a killer is alone.
--   $1 shard id   $2 lease token
-- @params shardId: number, leaseToken: string
-- Returns one row when the lease is ours: two_phase (boolean).
SELECT NOT EXISTS (SELECT 1 FROM timeout_center.shards o
                    WHERE o.kind = sh.kind AND o.state IN ('queued', 'running')
                      AND (o.attempts > 1 OR (o.state = 'queued' AND o.attempts > 0))) AS two_phase
  FROM timeout_center.shards sh
 WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
   FOR KEY SHARE OF sh
