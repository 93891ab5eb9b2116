-- bloated_indexes: the indexes of timeout_center.timeouts grown far past what their entries need
-- (the reindexer, reindexer.ts). A B-tree never gives its file back: after an old snapshot kept
-- every row claimed for an hour, VACUUM frees the pages once the snapshot ends, but the file keeps
-- the size it reached. An index is bloated when it is larger than $1 bytes and more than $2 times
-- 64 bytes (more than any of these indexes' entries take, page overhead included) per entry it
-- holds (pg_class.reltuples, as the last VACUUM or ANALYZE counted them), plus 64 kB.
--   $1 smallest size rebuilt (bytes)   $2 factor
-- @params minBytes: number, factor: number
SELECT c.relname AS name, pg_relation_size(c.oid)::float8 AS bytes, greatest(c.reltuples, 0)::float8 AS entries
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'timeout_center.timeouts'::regclass AND i.indisvalid AND i.indisready
   AND pg_relation_size(c.oid) > $1
   AND pg_relation_size(c.oid) > $2 * (greatest(c.reltuples, 0) * 64 + 65536)
 ORDER BY pg_relation_size(c.oid) DESC
