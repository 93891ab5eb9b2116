-- external_close_shard, Citus only: the last statement of the external record on the Citus layout
-- (docs/scale.md "Citus: what runs"), on the coordinator: the shard's row gets the counts that
-- citus/worker/external_record.sql returned and is done (external_record.sql's last step). Apart
-- from the timeouts part because Citus refuses a VOLATILE function (clock_timestamp(), the
-- instant the record ends) in an UPDATE's SET in any query that touches a distributed table.
-- Runs after citus/worker/external_record_lock.sql in the same transaction (the lease was checked
-- there, under the row's lock; checked again here).
--   $1 shard id   $2 lease token   $3 rows written   $4 applied   $5 skipped   $6 failed
--   $7 retried   $8 error sample (text, or NULL)
-- @params shardId: number, leaseToken: string, size: number, done: number, skipped: number, failed: number,
-- @params retried: number, errorSample: string | null
-- Returns the shard's counts and at_ms (epoch ms, as external_record.sql); no row when the lease
-- is no longer ours.
UPDATE timeout_center.shards sh
   SET state = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL, size = $3, held_ids = NULL,
       done_count = $4, skipped_count = $5, failed_count = $6, retried_count = $7, error_sample = $8
 WHERE sh.id = $1 AND sh.lease_token = $2 AND sh.state = 'running'
RETURNING sh.done_count AS done, sh.skipped_count AS skipped, sh.failed_count AS failed, sh.retried_count AS retried,
          date_part('epoch', clock_timestamp()) * 1000 AS at_ms
