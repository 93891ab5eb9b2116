-- stranded: timeouts dispatched to a shard that is finished (done or failed). No run will ever
-- apply them: a shard's claim takes its dispatched rows in the transaction that finishes it, a
-- split moves them in the one that closes it, and the abandon fails them with it. A count above
-- zero is a bug in timeout-center (a re-run's pin once committed after its lease ran out and the
-- next run had finished the shard: CHANGELOG), so the lag monitor exports it and alerts
-- (lag-monitor.ts; docs/operations.md "Stranded timeouts" says how to return them to pending).
-- The dispatched rows first (timeouts_in_flight: rows pinned or taken back by re-runs, a few),
-- then their shards: on the Citus layout timeouts is distributed and shards is the coordinator's,
-- so the rows are read on their own and joined on the coordinator.
SELECT d.kind::text AS kind, sum(d.n)::int AS stranded
  FROM (SELECT t.kind, t.shard_id, count(*) AS n FROM timeout_center.timeouts t
         WHERE t.state = 'dispatched' GROUP BY t.kind, t.shard_id) d
  JOIN timeout_center.shards sh ON sh.id = d.shard_id
 WHERE sh.state IN ('done', 'failed')
 GROUP BY d.kind
