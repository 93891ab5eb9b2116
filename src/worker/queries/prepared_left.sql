-- prepared_left: the two-phase external runs left prepared in the center's database for longer
-- than $1 ms (prepared-resolver.ts): their worker died, froze or lost a database between its
-- PREPARE TRANSACTION and its COMMIT PREPARED. Each holds its shard's row and timeouts locked until
-- it is resolved. Their global ids start with tc-x: (external-executor.ts, twoPhaseId).
--   $1 age (ms)
-- @params olderThanMs: number
SELECT gid FROM pg_prepared_xacts
 WHERE database = current_database() AND gid LIKE 'tc-x:%' AND prepared < now() - $1 * interval '1 millisecond'
 ORDER BY prepared
