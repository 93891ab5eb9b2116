-- latest_final: the latest final timeout of (kind, biz_id), for the API's settle when
-- timeout_center.settle found no live one (backend.ts): cancelled or failed in timeouts, done in
-- done_timeouts (which keeps the ids of the rows it took over), the newest by id. It scans, as GET's
-- final read does (get_timeout.sql): the history has no (kind, biz_id) index, so that a done row
-- costs no index entry (docs/api.md).
--   $1 kind   $2 biz_id
-- @params kind: string, bizId: string
SELECT f.state, f.result, f.shard_id, f.settled_by, f.last_error, f.finished_at
  FROM (SELECT t.id, t.state, t.result, t.shard_id, NULL::text AS settled_by, t.last_error, t.finished_at
          FROM timeout_center.timeouts t
         WHERE t.kind = timeout_center.kind_or_null($1) AND t.biz_id = $2 AND t.state NOT IN ('pending', 'dispatched')
        UNION ALL
        SELECT d.id, 'done', d.result, d.shard_id, d.settled_by, d.last_error, d.finished_at
          FROM timeout_center.done_timeouts d
         WHERE d.kind = $1 AND d.biz_id = $2) f
 ORDER BY f.id DESC
 LIMIT 1
