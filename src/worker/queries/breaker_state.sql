-- breaker_state: a circuit breaker of this worker changed state (breakers.ts): one row per kind,
-- target and worker in timeout_center.circuit_breakers.
--   $1 kind   $2 target   $3 worker id   $4 state (closed, open, half-open)   $5 last error
-- @params kind: string, target: string, worker: string, state: string, lastError: string | null
INSERT INTO timeout_center.circuit_breakers (kind, target, worker, state, last_error, changed_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (kind, target, worker) DO UPDATE SET state = EXCLUDED.state, last_error = EXCLUDED.last_error, changed_at = now()
