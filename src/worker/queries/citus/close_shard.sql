-- close_shard, Citus only: finish.sql's last step alone, for the batch form (its claim moved every
-- row already, with its result): the shard's row on the coordinator gets its counts and is done.
-- finish.sql with empty arrays would do the same, but on Citus its timeouts parts are distributed
-- subplans, each a round trip to the worker node for nothing.
--   $1 shard id   $2 timeouts the shard claimed   $3 of those, marked skipped by the claim
-- @params shardId: number, claimed: number, skippedMarked: number
-- Returns the shard's counts (as finish.sql).
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL, size = $2,
       done_count = $2 - $3, skipped_count = $3, failed_count = 0, retried_count = 0, error_sample = NULL
 WHERE sh.id = $1
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried
