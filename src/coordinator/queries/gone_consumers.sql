-- gone_consumers: of the shard channel's consumers that still hold deliveries (Redis pending
-- entries), the workers known here and gone: no heartbeat within $2 ms, or stopped
-- (timeout_center.worker_gone, sql/0018). Their deliveries are published again (recovery.ts). A
-- consumer this database never saw is left to XAUTOCLAIM: a worker reads a store's stream before
-- its first heartbeat in that store.
--   $1 consumers (text[])   $2 gone after (ms)
-- @params consumers: string[], goneAfterMs: number
SELECT w.worker_id
  FROM timeout_center.workers w
 WHERE w.worker_id = ANY ($1::text[]) AND timeout_center.worker_gone(w.worker_id, $2)
 ORDER BY w.worker_id
