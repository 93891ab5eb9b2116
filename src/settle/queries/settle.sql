-- settle: applies the live timeout of (kind, biz_id) now if it is due, with the kind's handler and
-- the claim's row lock, and answers what happened (settle.ts; timeout_center.settle, sql/0021,
-- describes each outcome).
--   $1 kind   $2 biz_id   $3 how long to wait for a worker holding the row (ms; 0: NOWAIT)
-- @params kind: string, bizId: string, waitMs: number
SELECT outcome, timeout_id, state, due_at, available_at, result, shard_id, detail
  FROM timeout_center.settle($1, $2, $3)
