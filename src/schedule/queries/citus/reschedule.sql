-- reschedule, Citus form: reschedule.sql in the row's bucket (timeout_center.bucket_of(biz_id)), so the
-- UPDATE routes to one worker node instead of visiting every shard. Keep in step with reschedule.sql.
-- reschedule: moves a pending timeout to a new due time (schedule.ts reschedule()). No row: no
-- pending timeout of (kind, biz_id).
--   $1 kind   $2 biz_id   $3 due at (timestamptz, or NULL)   $4 delay (ms, from now(); or NULL)
-- @params kind: string, bizId: string, dueAt: Date | null, delayMs: number | null
WITH d AS (
  -- the new due time on the Citus coordinator (Citus takes no STABLE function inside a COALESCE
  -- of a modification it sends to a worker node): a subplan, then one task on one node
  SELECT coalesce($3::timestamptz, now() + $4::double precision * interval '1 millisecond') AS due_at
)
UPDATE timeout_center.timeouts t
   SET due_at = d.due_at
  FROM d
 WHERE t.bucket = timeout_center.bucket_of($2) AND t.kind = timeout_center.kind_or_null($1) AND t.biz_id = $2 AND t.state = 'pending' RETURNING t.id
