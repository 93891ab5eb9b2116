-- copy_store_audit: a store's audit rows into the center's audit_log, naming the store and the
-- row's id there (sql/0015). A row copied before (a crash between this copy and the delete in the
-- store) hits the unique index and is skipped, so a repeated copy records nothing twice.
--   $1 the store's name, $2 the rows (jsonb: [{id, at, actor, action, kind, target, details}])
-- @params store: string, rows: string
INSERT INTO timeout_center.audit_log (at, actor, action, kind, target, details, store, store_audit_id)
SELECT r.at, r.actor, r.action, r.kind, r.target, r.details, $1::text, r.id
  FROM jsonb_to_recordset($2::jsonb) AS r (id bigint, at timestamptz, actor text, action text, kind text, target text, details jsonb)
 ORDER BY r.id
    ON CONFLICT (store, store_audit_id) WHERE store IS NOT NULL DO NOTHING
