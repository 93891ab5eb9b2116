-- schedule, Citus form (src/db/citus-layout.ts): schedule.sql naming the row's bucket
-- (timeout_center.bucket_of(biz_id), folded by Citus on the coordinator), so the insert and the
-- read route to the one worker node holding it; the unique index on a distributed table
-- includes the bucket. Keep in step with schedule.sql.
-- schedule: registers a timeout (schedule.ts schedule(), the business API; plain SQL from any
-- language does the same). Idempotent per live (kind, biz_id): scheduling again while the timeout
-- is pending moves it to the new due time and payload; a row pinned to a shard's re-run
-- (dispatched) is left alone and returned. A pending row a shard is applying now is row-locked by
-- that shard's transaction: this waits for its commit.
--   $1 kind   $2 biz_id   $3 due at (timestamptz, or NULL)   $4 delay (ms, from now(); or NULL)
--   $5 payload (jsonb text, or NULL)
-- @params kind: string, bizId: string, dueAt: Date | null, delayMs: number | null, payload: string | null
-- Returns id, due_at, created (false: a live timeout existed).
WITH ins AS (
  INSERT INTO timeout_center.timeouts AS t (kind, biz_id, due_at, payload, bucket)
  VALUES ($1, $2, coalesce($3::timestamptz, now() + $4::double precision * interval '1 millisecond'), $5::jsonb, timeout_center.bucket_of($2))
  ON CONFLICT (kind, biz_id, bucket) WHERE state IN ('pending', 'dispatched')
  DO UPDATE SET due_at = EXCLUDED.due_at, payload = EXCLUDED.payload WHERE t.state = 'pending'
  RETURNING id, due_at, (xmax = 0) AS created)
SELECT id::int8 AS id, due_at, created FROM ins
UNION ALL
SELECT id, due_at, false FROM timeout_center.timeouts
 WHERE bucket = timeout_center.bucket_of($2) AND kind = $1 AND biz_id = $2 AND state = 'dispatched' AND NOT EXISTS (SELECT 1 FROM ins)
