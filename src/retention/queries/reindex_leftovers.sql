-- reindex_leftovers: indexes of timeout_center.timeouts left INVALID by a REINDEX CONCURRENTLY that
-- failed or was cancelled (PostgreSQL names them <index>_ccnew or _ccold, with a number when there
-- were several): each is still written by every INSERT, and is dropped before the next rebuild.
SELECT c.relname AS name
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'timeout_center.timeouts'::regclass AND NOT i.indisvalid
   AND c.relname ~ '_cc(new|old)[0-9]*$'
