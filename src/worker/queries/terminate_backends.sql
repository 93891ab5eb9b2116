-- terminate_backends: a forced stop ends the sessions of the shards still running (worker.ts), so
-- their transactions roll back now rather than when the process exits.
--   $1 backend pids (int[])
-- @params pids: number[]
SELECT pg_terminate_backend(pid, 2000) FROM unnest($1::int[]) AS pid
