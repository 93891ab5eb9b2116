-- reschedule: moves a pending timeout to a new due time (schedule.ts reschedule()). No row: no
-- pending timeout of (kind, biz_id).
--   $1 kind   $2 biz_id   $3 due at (timestamptz, or NULL)   $4 delay (ms, from now(); or NULL)
-- @params kind: string, bizId: string, dueAt: Date | null, delayMs: number | null
UPDATE timeout_center.timeouts
   SET due_at = coalesce($3::timestamptz, now() + $4::double precision * interval '1 millisecond')
 WHERE kind = timeout_center.kind_or_null($1) AND biz_id = $2 AND state = 'pending' RETURNING id
