-- external_two_phase_move: the record of a two-phase external run (external-executor.ts,
-- runTwoPhase), after the handler, in the center transaction that is PREPAREd next: the rows its
-- claim locked (external_two_phase_claim.sql) move out of the hot table and into the history
-- (done_timeouts), each written once, applied when the business database changed it and skipped
-- when not, and the shard is done with its counts. Only a run whose every row was applied or
-- skipped gets here (a row-level failure sends the shard to the commit-first run, which records
-- failures and their retries).
--   $1 shard id   $2 lease token
--   $3 the claim's ctids, as it returned them (a tid[] literal): each row is reached where the
--      claim's lock is, without a look-up by id; the lock keeps every one of them where it was
--   $4 the biz_ids the business database changed (text[])
-- @params shardId: number, leaseToken: string, ctids: string, applied: string[]
-- Returns the shard's counts and moved (the rows moved: the run compares it with what it claimed,
-- and backs out on a difference); no row when the lease is not ours.
WITH ours AS MATERIALIZED (
  SELECT sh.id FROM timeout_center.shards sh
   WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
     FOR UPDATE
), taken AS (
  -- ARRAY(...): the ctids are read at run time, so the plan is a TID scan whatever their number
  -- (a constant array of thousands is estimated element by element when planned)
  DELETE FROM timeout_center.timeouts t
   WHERE t.ctid = ANY (ARRAY(SELECT unnest($3::tid[]))) AND EXISTS (SELECT 1 FROM ours)
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at
), moved AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts + 1, $1,
         CASE WHEN biz_id = ANY ($4::text[]) THEN 'applied' ELSE 'skipped' END, last_error, created_at, statement_timestamp()
    FROM taken
  RETURNING result
), c AS (
  SELECT count(*)::int AS n, (count(*) FILTER (WHERE result = 'skipped'))::int AS skipped FROM moved
)
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL, size = c.n, held_ids = NULL,
       done_count = c.n - c.skipped, skipped_count = c.skipped, failed_count = 0, retried_count = 0, error_sample = NULL
  FROM c, ours o
 WHERE sh.id = o.id
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried, sh.size AS moved
