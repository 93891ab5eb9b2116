-- schedule_batch: registers many timeouts in one statement (the HTTP API's batch, one transaction).
-- Each row exactly as schedule.sql does it: idempotent per live (kind, biz_id), a pending row moved
-- to the new due time and payload, a dispatched one (pinned to a shard's re-run) left alone and
-- returned. The caller refuses a (kind, biz_id) given twice (ON CONFLICT cannot touch a row twice).
-- Rows are inserted in (kind, biz_id) order, so two batches lock shared rows in the same order.
-- An unknown kind fails the cast to timeout_center.kind (22P02) and nothing is written.
-- The five columns come as five JSON arrays of one length, read side by side (ROWS FROM): one
-- JSON.stringify each on the caller's side, where pg's text arrays cost a JS loop per element
-- (and a payload, JSON inside an escaped array literal, twice).
--   $1 kinds (JSON array of strings)   $2 biz_ids (JSON array of strings)
--   $3 due times (JSON array: ms since the epoch, whole, or null: use the delay; seconds and
--      milliseconds apart, so the arithmetic is exact for any year)
--   $4 delays (JSON array: ms from now(), or null: use the due time)
--   $5 payloads (JSON array: [payload] for a payload given, null for none: a payload of null is
--      [null], kept as JSON null, none as SQL NULL)
--   $6 the request's W3C traceparent, kept with every row of the batch (NULL: none; sql/0022), and
--      replaced with it on a pending row moved, as schedule.sql does
-- @params kinds: string, bizIds: string, dueMs: string, delaysMs: string, payloads: string, traceParent: string | null
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
         coalesce(timestamptz 'epoch' + (i.due_ms::int8 / 1000) * interval '1 second' + (i.due_ms::int8 % 1000) * interval '1 millisecond',
                  now() + i.delay_ms::double precision * interval '1 millisecond') AS due_at,
         (i.payload -> 0)::jsonb AS payload
    FROM ROWS FROM (json_array_elements_text($1::json), json_array_elements_text($2::json), json_array_elements_text($3::json),
                    json_array_elements_text($4::json), json_array_elements($5::json)) AS i(kind, biz_id, due_ms, delay_ms, payload)),
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
