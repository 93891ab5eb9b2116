-- timeout_center.buckets: one row per bucket value of the layout (timeout_center.layout.buckets),
-- distributed on it and colocated with timeouts, so each Citus shard of it holds its bucket's one
-- row beside that bucket's timeouts. A read that probes every bucket joins it and correlates on
-- the bucket, and Citus then runs one task per shard with all of that read's probes in it
-- (citus/coordinator/due_probe.sql: the two index probes of a tick in one task, not one task
-- each). Applied by `timeout-center migrate` on a database with the Citus layout, after
-- sql/citus/layout.sql and at every migrate (nothing changes when it is there).
SET LOCAL citus.multi_shard_modify_mode = 'sequential';
CREATE TABLE IF NOT EXISTS timeout_center.buckets (bucket smallint PRIMARY KEY);
SELECT create_distributed_table('timeout_center.buckets', 'bucket', colocate_with => 'timeout_center.timeouts')
 WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'timeout_center.buckets'::regclass);
INSERT INTO timeout_center.buckets (bucket) SELECT unnest(buckets) FROM timeout_center.layout ON CONFLICT DO NOTHING;
