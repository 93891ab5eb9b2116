-- 0022_trace_context: a schedule request's trace context kept with its timeout (issue 33,
-- docs/tracing.md). schedule() writes the W3C traceparent of the request that scheduled it (given,
-- or the active span's), a plain INSERT may set it too, and the shard that applies the timeout
-- links its span to it (claim.sql returns up to 32 per shard). NULL when absent: a NULL costs
-- nothing in a pending row (its null bitmap already has room: 15 columns fit its 2 bytes), so the
-- bytes per pending timeout stay as before unless a trace context is given (55 bytes of text then).
-- ADD COLUMN without a default rewrites nothing.
ALTER TABLE timeout_center.timeouts ADD COLUMN trace_parent text;
COMMENT ON COLUMN timeout_center.timeouts.trace_parent IS
  'W3C traceparent of the request that scheduled it (00-<trace id>-<span id>-<flags>); the applying shard''s span links to it; NULL: none given';
