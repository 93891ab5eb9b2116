-- 0055_late_rows_by_writer_index: the pending rows written late by their writer's transaction id
-- (sql/0054), which the claim floors' late probe reads from the previous tick's xmin on. As small as
-- timeouts_written_late: only rows written late, and a row leaves it when it leaves pending.
-- tc:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_written_late_by_xid
  ON timeout_center.timeouts (kind, written_xid) WHERE state = 'pending' AND written_late;
