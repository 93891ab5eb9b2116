-- schedule_batch: registers many timeouts in one statement (the HTTP API's batch, one transaction).
-- Each row exactly as schedule.sql does it: idempotent per live (kind, biz_id), a pending row moved
-- to the new due time and payload, a dispatched one (pinned to a shard's re-run) left alone and
-- returned. The caller refuses a (kind, biz_id) given twice (ON CONFLICT cannot touch a row twice).
-- Rows are inserted in (kind, biz_id) order, so two batches lock shared rows in the same order.
-- An unknown kind fails the cast to timeout_center.kind (22P02) and nothing is written.
--   $1 kinds   $2 biz_ids   $3 due ats (timestamptz, NULL: use the delay)
--   $4 delays (ms from now(), NULL: use the due at)   $5 payloads (jsonb text or NULL)
--   $6 the request's W3C traceparent, kept with every row of the batch (NULL: none; sql/0022), and
--      replaced with it on a pending row moved, as schedule.sql does
-- @params kinds: string[], bizIds: string[], dueAts: (Date | null)[], delaysMs: (number | null)[], payloads: (string | null)[], traceParent: string | null
-- Returns one row per timeout, in no particular order (the caller pairs them by kind and biz_id,
-- which the batch names once each): kind, biz_id, id, due_ms (the stored due time in whole
-- milliseconds since the epoch, truncated as a JS Date of it would be: no timestamptz text to
-- format here and parse there), created, written. The rows written come from RETURNING alone;
-- only when fewer were written than sent (a dispatched one left alone) is the input matched to
-- the dispatched rows (written false). A row dispatched in this statement's snapshot that went
-- final before the insert reached it is written anew and also found dispatched: the caller keeps
-- the written one.
WITH input AS (
  SELECT i.kind::timeout_center.kind AS kind, i.biz_id,
         coalesce(i.due_at, now() + i.delay_ms * interval '1 millisecond') AS due_at, i.payload::jsonb AS payload
    FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::double precision[], $5::text[]) AS i(kind, biz_id, due_at, delay_ms, payload)),
ins AS (
  INSERT INTO timeout_center.timeouts AS t (kind, biz_id, due_at, payload, trace_parent)
  SELECT kind, biz_id, due_at, payload, $6::text FROM input ORDER BY kind, biz_id
  ON CONFLICT (kind, biz_id) WHERE state IN ('pending', 'dispatched')
  DO UPDATE SET due_at = EXCLUDED.due_at, payload = EXCLUDED.payload, trace_parent = EXCLUDED.trace_parent WHERE t.state = 'pending'
  RETURNING t.kind, t.biz_id, t.id, t.due_at, (xmax = 0) AS created)
SELECT kind, biz_id, id, trunc(extract(epoch FROM due_at) * 1000)::int8 AS due_ms, created, true AS written FROM ins
UNION ALL
SELECT d.kind, d.biz_id, d.id, trunc(extract(epoch FROM d.due_at) * 1000)::int8, false, false
  FROM input
  JOIN timeout_center.timeouts d ON d.kind = input.kind AND d.biz_id = input.biz_id AND d.state = 'dispatched'
 WHERE (SELECT count(*) FROM ins) < (SELECT count(*) FROM input)
