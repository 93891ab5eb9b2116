-- store_audit_outbox: the oldest audit rows of a store's database not yet copied to the center
-- (sql/0015): operator actions on the store's timeouts. The rows the store's leader writes when it
-- copies the center's flow controls (actor 'center', stores/shared-controls.ts) echo a change the
-- center recorded already and stay here.
--   $1 how many rows at most
-- @params limit: number
-- Returns id, at, actor, action, kind, target, details.
SELECT id, at, actor, action, kind, target, details
  FROM timeout_center.audit_log
 WHERE store IS NULL AND actor <> 'center'
 ORDER BY id
 LIMIT $1
