-- breaker_forget: a stopping worker's breakers no longer apply (breakers.ts).
--   $1 worker id
-- @params worker: string
DELETE FROM timeout_center.circuit_breakers WHERE worker = $1
