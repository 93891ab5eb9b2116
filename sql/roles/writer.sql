-- writer: a business service (README section 3). Its own timeouts only: insert, cancel and
-- reschedule them with plain SQL, read them (the row-level security of timeouts limits a writer
-- listed in writer_kinds to its kinds), settle them (timeout_center.settle). Nothing else of the
-- schema: no shard, scan, lease, kind, flow control, audit row or history. The columns a row's
-- state machine and the engine own (state on insert, attempts, shard_id, result, target, ...) are
-- not the writer's to set.
GRANT USAGE ON SCHEMA timeout_center TO timeout_center_writer;
GRANT SELECT ON timeout_center.timeouts TO timeout_center_writer;
GRANT INSERT (kind, biz_id, due_at, payload, trace_parent) ON timeout_center.timeouts TO timeout_center_writer;
GRANT UPDATE (state, finished_at, due_at, payload, trace_parent) ON timeout_center.timeouts TO timeout_center_writer;
