-- claim: second statement of the shard transaction. Claims up to the shard's limit of due pending
-- timeouts of its kind, in due order, and marks them done (applied) in the same write: the one
-- write of each timeout on its way to done. finish.sql then corrects only the exceptions
-- (skipped, failed). SKIP LOCKED lets shards of the same kind run side by side on disjoint rows and
-- passes over a row a payer is cancelling right now; the row locks taken here hold until commit,
-- so a cancel arriving later waits and then finds nothing live. If the worker dies before commit
-- the rows are simply pending again.
--   $1 shard id   $2 kind   $3 claim limit
-- Returns the claimed timeouts the handler gets, with their lateness (s).
UPDATE timeout_center.timeouts t
   SET state = 'done', result = 'applied', attempts = t.attempts + 1, finished_at = statement_timestamp(),
       shard_id = $1
 WHERE t.id IN (SELECT d.id FROM timeout_center.timeouts d
                 WHERE d.kind = $2 AND d.state = 'pending' AND d.available_at <= statement_timestamp()
                 ORDER BY d.available_at
                 LIMIT $3
                   FOR UPDATE SKIP LOCKED)
   AND t.state = 'pending'
RETURNING t.id, t.biz_id, t.payload, extract(epoch FROM statement_timestamp() - t.due_at)::float8 AS lateness
