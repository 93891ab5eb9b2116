-- republish_queued: queued shards that no worker took within $1 ms (their message was lost, or
-- the coordinator died before publishing), or every queued shard when $2 is true (the channel
-- lost its data).
--   $1 republish-after (ms)   $2 all (boolean)   $3 max shards
--   $4 the oldest shard id in flight (claim-floors.ts; sql/0042): the shards below it are final
-- @params republishAfterMs: number, all: boolean, maxShards: number, shardsFrom: number
-- Flow control (sql/0006): a shard whose kind is paused, or has max_running_shards running, is
-- held: not published (a worker would only hand it back) but marked unpublished, so that the
-- first reap after the kind may run it again publishes it. Held shards already unpublished are
-- passed over, so holding costs no write per tick.
-- Returns (id, scan_id, kind) to publish.
WITH chosen AS (
  SELECT sh.id, h.held
    FROM timeout_center.shards sh
    JOIN timeout_center.kinds k ON k.kind = sh.kind
   CROSS JOIN LATERAL (
         SELECT k.paused OR (k.max_running_shards IS NOT NULL
                             AND (SELECT count(*) FROM timeout_center.shards r
                                   WHERE r.kind = sh.kind AND r.state = 'running' AND r.id >= $4) >= k.max_running_shards) AS held) h
   WHERE sh.state = 'queued' AND sh.id >= $4
     AND ($2 OR sh.published_at IS NULL OR sh.published_at < now() - $1 * interval '1 millisecond')
     AND NOT (h.held AND sh.published_at IS NULL)
   ORDER BY sh.id
   LIMIT $3
     FOR UPDATE OF sh SKIP LOCKED
), published AS (
  UPDATE timeout_center.shards sh
     SET published_at = CASE WHEN c.held THEN NULL ELSE now() END,
         publish_count = sh.publish_count + CASE WHEN c.held THEN 0 ELSE 1 END
    FROM chosen c
   WHERE sh.id = c.id
  RETURNING sh.id, sh.scan_id, sh.kind, c.held
)
SELECT id, scan_id, kind FROM published WHERE NOT held
