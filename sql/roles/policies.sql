-- policies: the row-level security of timeout_center.timeouts (writers limited to their kinds,
-- sql/0040's writer_kinds). Policies apply to the roles they name; the table's owner (migrate)
-- bypasses them. The engine, the operator and the reader see every row: their policy is a
-- constant true, which the planner folds away (docs/roles.md gives the measured cost). A writer's
-- is on the row's kind alone, evaluated once per statement (sql/0040's writable_kinds). src/db/roles.ts
-- creates each policy that is missing and enables row-level security once.
CREATE POLICY timeouts_engine ON timeout_center.timeouts TO timeout_center_engine, timeout_center_operator USING (true) WITH CHECK (true);
CREATE POLICY timeouts_reader ON timeout_center.timeouts FOR SELECT TO timeout_center_reader USING (true);
CREATE POLICY timeouts_writer_read ON timeout_center.timeouts FOR SELECT TO timeout_center_writer
  USING (kind = ANY (timeout_center.writable_kinds()));
CREATE POLICY timeouts_writer_insert ON timeout_center.timeouts FOR INSERT TO timeout_center_writer
  WITH CHECK (kind = ANY (timeout_center.writable_kinds()));
CREATE POLICY timeouts_writer_update ON timeout_center.timeouts FOR UPDATE TO timeout_center_writer
  USING (kind = ANY (timeout_center.writable_kinds()) AND state IN ('pending', 'dispatched'))
  WITH CHECK (kind = ANY (timeout_center.writable_kinds()) AND state IN ('pending', 'dispatched', 'cancelled'));
