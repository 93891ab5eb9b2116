-- 0002_retention: indexes for purging old rows and for retrying failed timeouts by shard.
--
-- Retention deletes done and cancelled timeouts oldest first. 0001's timeouts_finished index also
-- held failed rows, which retention keeps (operators retry them): every purge batch would walk past
-- all old failed rows again. This partial index holds only the purgeable rows; it replaces
-- timeouts_finished, which nothing else reads (a final row is written once, so the index costs the
-- same one insert per finished timeout as before).
CREATE INDEX timeouts_purgeable ON timeout_center.timeouts (finished_at) WHERE state IN ('done', 'cancelled');
DROP INDEX timeout_center.timeouts_finished;

-- `timeout-center retry --shard <id>` and the scan purge (a scan is kept while failed timeouts of
-- its shards remain) look failed timeouts up by shard. Failed rows are few: the index is small.
CREATE INDEX timeouts_failed_by_shard ON timeout_center.timeouts (shard_id) WHERE state = 'failed';
