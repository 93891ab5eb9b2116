-- 0051_history_partitioned: timeout_center.done_timeouts becomes a table partitioned by UTC day
-- of finished_at, online, with the functions of 0050 (read there what each step locks). Each
-- statement is its own transaction and may be run again: a run cut off anywhere does the rest the
-- next time. The old table becomes the partition of everything before X (a day boundary a day or
-- more ahead, chosen by the first statement); retention deletes it by batch until it has wholly
-- aged out, then drops it, and drops each later day whole. Nothing is converted on a database with
-- the citus extension (0050).
--
-- The previous release runs on it unchanged: its statements name timeout_center.done_timeouts,
-- which is now the parent; an INSERT routes each row to its day, and none of them needs a unique
-- index over the parent (no ON CONFLICT on the history).
-- tc:no-transaction
SELECT timeout_center.history_cut_add();
SELECT timeout_center.history_cut_validate();
SELECT timeout_center.history_partition();
