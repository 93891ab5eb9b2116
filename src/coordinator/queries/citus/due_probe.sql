-- due_probe, Citus only: for one kind, the latest claimable time among its timeouts already due
-- (NULL: none due) and the earliest still to come, the two index probes next_due.sql makes per
-- kind. next_due.sql's LATERAL per kind, correlated on kind, does not run over a distributed
-- table. Both probes are subqueries correlated on the bucket of timeout_center.buckets (one row
-- per bucket, colocated with timeouts: sql/citus/buckets.sql), so Citus runs one task per shard
-- with both probes of timeouts_due_by_kind in it and takes the max / min over the shards. (As two
-- uncorrelated aggregates it was two tasks per shard: 2.9-4.6 ms of the Citus coordinator's CPU
-- per tick against 2.0-2.3 ms, measured on 16 buckets; docs/benchmarks.md "A timeout database on
-- Citus".) The coordinator runs it once per kind per tick, then citus/next_due.sql with the
-- results.
--   $1 kind
-- @params kind: string
SELECT max(p.latest) AS latest, min(p.next_after) AS next_after
  FROM (SELECT (SELECT max(t.available_at) FROM timeout_center.timeouts t
                 WHERE t.bucket = b.bucket AND t.kind = $1::text::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()) AS latest,
               (SELECT min(t.available_at) FROM timeout_center.timeouts t
                 WHERE t.bucket = b.bucket AND t.kind = $1::text::timeout_center.kind AND t.state = 'pending' AND t.available_at > now()) AS next_after
          FROM timeout_center.buckets b) p
