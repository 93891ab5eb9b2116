-- republish_queued: queued shards that no worker took within $1 ms (their message was lost, or
-- the coordinator died before publishing), or every queued shard when $2 is true (the channel
-- lost its data).
--   $1 republish-after (ms)   $2 all (boolean)   $3 max shards
-- Returns (id, scan_id, kind) to publish.
UPDATE timeout_center.shards sh
   SET published_at = now(), publish_count = publish_count + 1
 WHERE sh.id IN (SELECT id FROM timeout_center.shards
                  WHERE state = 'queued'
                    AND ($2 OR published_at IS NULL OR published_at < now() - $1 * interval '1 millisecond')
                  ORDER BY id LIMIT $3
                    FOR UPDATE SKIP LOCKED)
RETURNING sh.id, sh.scan_id, sh.kind
