-- backlog: per kind, what is due and not final, what shards hold, and the oldest lag (the backlog
-- view, sql/0008), for the lag monitor's gauges and its SLA alert (lag-monitor.ts).
SELECT kind, pending_due, in_flight, extract(epoch FROM oldest_lag)::float8 AS lag_s, paused FROM timeout_center.backlog
