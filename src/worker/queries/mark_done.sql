-- mark_done: second statement of the shard transaction when the shard holds pinned rows (a re-run
-- after a worker died, see pin.sql): marks them done (applied) and locks them, in one write per
-- row; finish.sql then corrects only the exceptions (skipped, failed). A pinned timeout cancelled
-- before this point is not here and never acts. Returns nothing for a first run: claim.sql then
-- claims the shard's rows.
--   $1 shard id
-- Returns the live timeouts the handler gets, with their lateness (s).
UPDATE timeout_center.timeouts
   SET state = 'done', result = 'applied', attempts = attempts + 1, finished_at = statement_timestamp()
 WHERE shard_id = $1 AND state = 'dispatched'
RETURNING id, biz_id, payload, extract(epoch FROM statement_timestamp() - due_at)::float8 AS lateness
