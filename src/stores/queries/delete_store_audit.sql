-- delete_store_audit: a store's audit rows once the center holds their copies (sql/0015).
--   $1 their ids in the store
-- @params ids: number[]
DELETE FROM timeout_center.audit_log WHERE id = ANY ($1::bigint[])
