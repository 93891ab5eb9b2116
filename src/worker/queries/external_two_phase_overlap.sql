-- external_two_phase_overlap: the last statement of a two-phase run's claim (external-executor.ts,
-- runTwoPhase), with a snapshot of its own. external_two_phase_claim.sql passes by the ids the
-- kind's other live shards hold as its snapshot saw them; a commit-first claim (a re-run, or a run
-- that backed out of two phases) that committed after that snapshot released its row locks at its
-- commit, so the claim may have locked rows that claim holds (they stay pending while held). This
-- says whether any of the ids the claim locked (held_ids, written by it in this transaction) is
-- held by another live shard of the kind: then the run backs out.
--   $1 shard id   $2 kind
-- @params shardId: number, kind: string
-- Returns one row: overlap (int, how many of the ids another live shard holds).
SELECT count(*)::int AS overlap
  FROM unnest((SELECT sh.held_ids FROM timeout_center.shards sh WHERE sh.id = $1)) AS x (id)
 WHERE x.id IN (SELECT unnest(o.held_ids) FROM timeout_center.shards o
                 WHERE o.kind = $2 AND o.held_ids IS NOT NULL AND o.state IN ('queued', 'running') AND o.id <> $1)
