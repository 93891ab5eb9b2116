-- 0013_live_workers: which kinds a live worker serves, for the map's backpressure.
--
-- A worker announces itself every 5 s in timeout_center.workers with the kinds it serves; one not
-- seen for 15 s, or stopped, is gone (the same window `timeout-center status` uses). The map used
-- to count every queued shard toward maxInFlightShards, so the shards of a kind that no live worker
-- reads (a worker.kinds filter, a dedicated pool that is down, a kind left out of the workers'
-- config) filled the bound and stalled every other kind. Now those shards are left out of the
-- bound, such a kind gets no new shard beyond one waiting (coordinator/queries/plan_shards.sql), and
-- the coordinator warns and raises `kind_unserved` while it lasts (next_due.sql's unserved).
CREATE VIEW timeout_center.live_workers AS
SELECT w.worker_id, w.host, w.pid, w.kinds, w.started_at, w.last_seen_at
  FROM timeout_center.workers w
 WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - interval '15 seconds';

COMMENT ON VIEW timeout_center.live_workers IS 'workers seen in the last 15 s and not stopped: the kinds they serve get shards';
