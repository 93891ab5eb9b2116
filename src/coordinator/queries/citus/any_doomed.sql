-- any_doomed, Citus only: whether any shard is for abandon_shards.sql to fail now (a lease run out
-- after its kind's max attempts), read on the coordinator alone. The reaper runs the Citus
-- abandon_shards.sql only then: that statement's UPDATE of the pinned rows is a multi-shard
-- modification, which Citus sends to every shard and commits with two-phase commit on every
-- worker node even when no shard is doomed (once per reap, every second).
-- Returns doomed (boolean).
SELECT EXISTS (SELECT 1 FROM timeout_center.shards sh JOIN timeout_center.kinds k ON k.kind = sh.kind
                WHERE sh.state = 'running' AND sh.lease_expires_at < now() AND sh.attempts >= k.max_attempts) AS doomed
