-- due_probe, Citus only: for one kind, the latest claimable time among its timeouts already due
-- (NULL: none due) and the earliest still to come, the two index probes next_due.sql makes per
-- kind. Two uncorrelated aggregates: Citus runs each on every shard (one probe of
-- timeouts_due_by_kind there) and takes the max / min; next_due.sql's LATERAL per kind, correlated
-- on kind, does not run over a distributed table. The coordinator runs it once per kind per tick,
-- then citus/next_due.sql with the results.
--   $1 kind
-- @params kind: string
SELECT (SELECT max(t.available_at) FROM timeout_center.timeouts t
         WHERE t.kind = $1::text::timeout_center.kind AND t.state = 'pending' AND t.available_at <= now()) AS latest,
       (SELECT min(t.available_at) FROM timeout_center.timeouts t
         WHERE t.kind = $1::text::timeout_center.kind AND t.state = 'pending' AND t.available_at > now()) AS next_after
