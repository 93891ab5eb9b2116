-- 0015_store_audit: one audit log across stores (issue 27, docs/scale.md "Acting across stores").
-- An operator action on a store's timeouts (retry, cancel, reschedule, rerun, purge) changes rows
-- in the store's database, and its audit row is written there in the same transaction, so the
-- action and its record commit or roll back together. The store's audit_log is an outbox: the
-- verb that acted, and the store's leader every few seconds, copy its rows into the center's
-- audit_log (the one source of truth, where the console and `audit_log` queries read) and delete
-- them from the store. A copy names the store it came from and the row it was there, so a copy
-- repeated after a crash between the two steps is recognised and skipped.
ALTER TABLE timeout_center.audit_log
  ADD COLUMN store           text,
  ADD COLUMN store_audit_id  bigint,
  ADD CONSTRAINT audit_log_store_copy CHECK ((store IS NULL) = (store_audit_id IS NULL));

CREATE UNIQUE INDEX audit_log_store_copies ON timeout_center.audit_log (store, store_audit_id) WHERE store IS NOT NULL;
