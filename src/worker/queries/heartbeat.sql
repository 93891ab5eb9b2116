-- heartbeat: a worker says it is alive and which kinds it serves (worker.ts, every heartbeat; the
-- live_workers view reads last_seen_at). A restarted worker id clears its stopped_at.
--   $1 worker id   $2 host   $3 pid   $4 kinds (text[])
-- @params workerId: string, host: string, pid: number, kinds: string[]
INSERT INTO timeout_center.workers (worker_id, host, pid, kinds) VALUES ($1, $2, $3, $4)
ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL, kinds = EXCLUDED.kinds
