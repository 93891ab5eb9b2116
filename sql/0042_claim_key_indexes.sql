-- 0042_claim_key_indexes: the indexes 0041's keys seek on (issue 45).
--   - timeouts_due_by_key: the due index with the id after the due time, so that a claim floor
--     (available_at, id) seeks into one due instant's rows. It replaces timeouts_due_by_kind
--     (kind, available_at), whose every query it serves in the same order; dropped once the new
--     one is valid, so the hot table keeps one due index (every insert writes each index).
--   - shards_in_flight_by_id: the shards queued or running by id. The map counts them at every
--     tick; under an old snapshot held elsewhere every version a shard left on its way through
--     queued and running stays in shards_in_flight until VACUUM may remove it, and that count
--     walked them all (p99 4-5x after an hour). The coordinator now counts from the oldest shard
--     it saw in flight (next_due.sql), on this index.
-- tc:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_due_by_key
  ON timeout_center.timeouts (kind, available_at, id) WHERE state = 'pending';

DROP INDEX CONCURRENTLY IF EXISTS timeout_center.timeouts_due_by_kind;

CREATE INDEX CONCURRENTLY IF NOT EXISTS shards_in_flight_by_id
  ON timeout_center.shards (id) WHERE state IN ('queued', 'running');
