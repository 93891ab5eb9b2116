-- worker_stopped: the last word of a stopping worker (worker.ts): it no longer counts as live.
--   $1 worker id
-- @params workerId: string
UPDATE timeout_center.workers SET stopped_at = now(), last_seen_at = now() WHERE worker_id = $1
