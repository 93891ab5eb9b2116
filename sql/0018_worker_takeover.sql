-- 0018_worker_takeover: takeover bounded by a worker's death, not by its lease.
--
-- A worker writes a heartbeat (sql/0013) every third of worker.goneAfterMs (default 3 s). One not
-- seen for goneAfterMs, or stopped, is gone: the leader's reaper ends the leases it still holds
-- (coordinator/queries/expire_gone.sql) and republishes the deliveries Redis still has pending
-- under it, within goneAfterMs plus one reap (1 s), whatever worker.leaseMs is; and the map does
-- not count a shard running under a gone worker as covering due rows (plan_shards.sql).
--
-- claim_attempt: the attempt whose run began its claim, committed just before the claim (same-
-- database path: worker/queries/mark_claim.sql; the external path commits its claimed rows as
-- `dispatched` instead). A re-run pins and splits its rows as suspects of killing workers
-- (docs/architecture.md "Isolating a row that kills workers") only when an earlier run got that
-- far: a run that died before its claim (a read-ahead delivery, a worker frozen or killed between
-- its lease and its claim) held no row, and its re-run runs as a first run does.
ALTER TABLE timeout_center.shards ADD COLUMN claim_attempt integer NOT NULL DEFAULT 0;

COMMENT ON COLUMN timeout_center.shards.claim_attempt IS
  'the attempt whose run last began its claim (0: no run got that far); a re-run treats its rows as suspects of killing workers only when > 0';

-- Gone: no heartbeat within bound_ms (on the database clock), stopped, or never seen. One
-- definition for the reaper and the map.
CREATE FUNCTION timeout_center.worker_gone(worker text, bound_ms integer) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (SELECT 1 FROM timeout_center.workers w
                      WHERE w.worker_id = worker AND w.stopped_at IS NULL
                        AND w.last_seen_at > now() - bound_ms * interval '1 millisecond')
$$;

COMMENT ON FUNCTION timeout_center.worker_gone(text, integer) IS
  'true when the worker has not written its heartbeat within bound_ms, stopped, or is unknown: its shards are taken over';
