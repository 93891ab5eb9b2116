-- cancel, Citus form: cancel.sql in the row's bucket (timeout_center.bucket_of(biz_id)), so the
-- UPDATE routes to one worker node instead of visiting every shard. Keep in step with cancel.sql.
-- cancel: cancels the pending timeout of (kind, biz_id) (schedule.ts cancel()); a cancelled
-- timeout never acts. No row: too late (dispatched, final) or nothing scheduled (an unknown kind
-- too: kind_or_null, sql/0017).
--   $1 kind   $2 biz_id
-- @params kind: string, bizId: string
UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
 WHERE bucket = timeout_center.bucket_of($2) AND kind = timeout_center.kind_or_null($1) AND biz_id = $2 AND state = 'pending' RETURNING id
