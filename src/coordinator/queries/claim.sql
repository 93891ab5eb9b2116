-- claim: moves up to $4 due timeouts into new shards of scan $1, in due order. One statement per
-- chunk; runs inside the coordinator's fenced transaction.
--   $1 scan id   $2 cutoff (timestamptz)   $3 kinds this coordinator serves (text[])   $4 max rows
-- Returns the new shards (id, kind, size).
WITH due AS (
  SELECT t.id, t.kind
    FROM timeout_center.timeouts t
   WHERE t.state = 'pending' AND t.available_at <= $2 AND t.kind = ANY ($3::text[])
   ORDER BY t.available_at
   LIMIT $4
     FOR UPDATE SKIP LOCKED
), bucketed AS (
  SELECT d.id, d.kind, (row_number() OVER (PARTITION BY d.kind ORDER BY d.id) - 1) / k.shard_size AS bucket
    FROM due d JOIN timeout_center.kinds k ON k.kind = d.kind
), base AS (
  SELECT coalesce(max(seq) + 1, 0) AS next_seq FROM timeout_center.shards WHERE scan_id = $1
), numbered AS (
  SELECT b.id, b.kind, (SELECT next_seq FROM base) + dense_rank() OVER (ORDER BY b.kind, b.bucket) - 1 AS seq
    FROM bucketed b
), new_shards AS (
  INSERT INTO timeout_center.shards (scan_id, kind, seq, size, published_at, publish_count)
  SELECT $1, n.kind, n.seq, count(*), now(), 1 FROM numbered n GROUP BY n.kind, n.seq
  RETURNING id, kind, seq, size
), marked AS (
  UPDATE timeout_center.timeouts t
     SET state = 'dispatched', shard_id = s.id
    FROM numbered n JOIN new_shards s ON s.kind = n.kind AND s.seq = n.seq
   WHERE t.id = n.id
  RETURNING t.id
), counted AS (
  UPDATE timeout_center.scans
     SET claimed = claimed + (SELECT count(*) FROM marked),
         shard_count = shard_count + (SELECT count(*) FROM new_shards)
   WHERE id = $1
  RETURNING id
)
SELECT s.id, s.kind, s.size, (SELECT count(*) FROM counted) AS scan_rows FROM new_shards s ORDER BY s.id
