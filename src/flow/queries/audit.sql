-- audit: records an operator action other than a change of controls (retry, cancel, rerun_shard,
-- ...) in timeout_center.audit_log (kind-controls.ts recordAudit), in the transaction of the change.
--   $1 actor   $2 action   $3 kind (or NULL)   $4 target (or NULL)   $5 details (jsonb text)
-- @params actor: string, action: string, kind: string | null, target: string | null, details: string
INSERT INTO timeout_center.audit_log (actor, action, kind, target, details) VALUES ($1, $2, $3, $4, $5)
