-- split_pinned, Citus form: split_pinned.sql with the timeouts part in the shard's bucket ($3);
-- the children keep the parent's bucket. Keep in step with split_pinned.sql.
-- split_pinned: isolates a row that kills workers without condemning its shard mates. A shard
-- that runs again after its worker died (attempt > 1) has pinned its rows (pin.sql). Instead of
-- applying them all again, it hands them to two new queued shards of the same scan, half each
-- (still pinned: state dispatched), and closes itself with nothing applied. A half without the
-- killing row commits on its first run (the halves keep the shard's target: external path); the half with it dies, is re-run and splits again. So the
-- killer ends alone in a one-row shard, which the reaper abandons after the kind's max attempts,
-- failing that row only. Each level costs one worker death; a 500-row shard needs about 9.
-- Runs in a transaction that first locks the scan row (so the new shards' seq are unique).
--   $1 shard id   $2 lease token   $3 the shard's bucket (both halves keep it)
-- @params shardId: number, leaseToken: string, bucket: number
-- Returns the new shards (id, scan_id, kind, claim_limit); none when the shard holds fewer than 2
-- pinned rows (it is then applied as is) or the lease is no longer ours.
WITH parent AS (
  SELECT id, scan_id, kind, target, bucket FROM timeout_center.shards
   WHERE id = $1 AND lease_token = $2 AND state = 'running'
     FOR UPDATE
), locked AS (
  SELECT t.id FROM timeout_center.timeouts t
   WHERE t.bucket = $3 AND t.shard_id = $1 AND t.state = 'dispatched' AND EXISTS (SELECT 1 FROM parent)
     FOR UPDATE
), held AS (
  SELECT id, row_number() OVER (ORDER BY id) AS rn, count(*) OVER () AS n FROM locked
), base AS (
  SELECT coalesce(max(s.seq), 0) AS seq FROM timeout_center.shards s WHERE s.scan_id = (SELECT scan_id FROM parent)
), halves AS (
  SELECT g AS half, CASE WHEN g = 1 THEN ceil(n / 2.0)::int ELSE (n - ceil(n / 2.0))::int END AS size
    FROM (SELECT max(n) AS n FROM held) h, generate_series(1, 2) g
   WHERE h.n >= 2
), children AS (
  INSERT INTO timeout_center.shards (scan_id, kind, target, bucket, seq, size, claim_limit, state)
  SELECT p.scan_id, p.kind, p.target, p.bucket, b.seq + h.half, 0, h.size, 'queued'
    FROM parent p, base b, halves h
  RETURNING id, scan_id, kind, seq, claim_limit
), moved AS (
  UPDATE timeout_center.timeouts t
     SET shard_id = c.id
    FROM held r, children c, base b
   WHERE t.bucket = $3 AND t.id = r.id AND c.seq = b.seq + CASE WHEN r.rn <= ceil(r.n / 2.0) THEN 1 ELSE 2 END
  RETURNING t.id
), closed AS (
  UPDATE timeout_center.shards sh
     SET state = 'done', finished_at = now(), lease_expires_at = NULL, size = 0,
         done_count = 0, skipped_count = 0, failed_count = 0, retried_count = 0,
         error_sample = format('split into shards %s after its worker died (isolating the row that kills workers)',
                               (SELECT string_agg(id::text, ', ' ORDER BY id) FROM children))
   WHERE sh.id = $1 AND EXISTS (SELECT 1 FROM children)
  RETURNING sh.id
)
SELECT c.id, c.scan_id, c.kind, c.claim_limit, (SELECT count(*) FROM moved)::int AS moved, (SELECT count(*) FROM closed)::int AS closed
  FROM children c ORDER BY c.id
