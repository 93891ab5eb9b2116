-- 0011_shard_not_before: a shard written before its rows are due.
--
-- A flood due at one instant is counted before it (coordinator/queries/count_ahead.sql). The
-- coordinator now also writes and publishes that flood's shards then, each with not_before = the
-- instant (the count's cutoff, on the database clock), so that at the instant the workers already
-- hold their first shards' leases and start claiming at once: no plan, publish or lease between
-- the due instant and the first claim. A worker that takes such a shard waits until not_before
-- (take_lease.sql returns how long, measured on the database clock) before it claims. The claim
-- never takes a row that is not due anyway (available_at <= statement_timestamp(), claim.sql), so
-- a shard started early could only claim less, never close an order early.
-- NULL (every shard planned at or after its rows' due time): no wait.
ALTER TABLE timeout_center.shards ADD COLUMN not_before timestamptz;

COMMENT ON COLUMN timeout_center.shards.not_before IS 'planned ahead of its rows'' due instant: no worker claims before this time (database clock); NULL: at once';
