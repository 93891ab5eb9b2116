-- external_two_phase_record: the record of a two-phase external run (external-executor.ts,
-- runTwoPhase), after the handler, in the center transaction that is PREPAREd next: the history
-- rows its claim wrote as applied (external_claim_move.sql) that the business database did not
-- change become skipped, and the shard is done with its counts. Only a run whose every row was
-- applied or skipped gets here (a row-level failure sends the shard to the commit-first run,
-- which records failures and their retries).
--   $1 shard id   $2 lease token   $3 the ids of the skipped rows (bigint[])
-- @params shardId: number, leaseToken: string, skippedIds: string[]
-- Returns the shard's counts (no row when the lease is not ours).
WITH ours AS MATERIALIZED (
  SELECT sh.id, cardinality(sh.held_ids) AS n FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
     FOR UPDATE
), skipped AS (
  UPDATE timeout_center.done_timeouts d SET result = 'skipped'
   WHERE d.id = ANY ($3::bigint[]) AND d.shard_id = $1 AND EXISTS (SELECT 1 FROM ours)
  RETURNING d.id
), c AS (
  SELECT coalesce((SELECT n FROM ours), 0) AS n, (SELECT count(*)::int FROM skipped) AS skipped
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL, size = c.n, held_ids = NULL,
       done_count = c.n - c.skipped, skipped_count = c.skipped, failed_count = 0, retried_count = 0, error_sample = NULL
  FROM c, ours o
 WHERE sh.id = o.id
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried
