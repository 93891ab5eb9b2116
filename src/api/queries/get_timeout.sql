-- get_timeout: the timeout of (kind, biz_id) as the HTTP API's GET shows it: the live one when
-- there is one (the unique index on live rows), else the latest final one by id (cancelled or
-- failed in timeouts, done in done_timeouts, which keeps the ids of the rows it took over). The
-- final read scans: the history has no (kind, biz_id) index, so that a done row costs no index
-- entry (docs/api.md). The shard's scan comes with it. The branches run in order and LIMIT 1
-- stops at the first that answers.
--   $1 kind   $2 biz_id
-- @params kind: string, bizId: string
SELECT r.id, r.kind, r.biz_id, r.state, r.result, r.due_at, r.attempts, r.last_error, r.shard_id,
       s.scan_id, r.created_at, r.finished_at
  FROM ((SELECT t.id, t.kind::text AS kind, t.biz_id, t.state, t.result, t.due_at, t.attempts, t.last_error, t.shard_id,
                t.created_at, t.finished_at
           FROM timeout_center.timeouts t
          WHERE t.kind = timeout_center.kind_or_null($1) AND t.biz_id = $2 AND t.state IN ('pending', 'dispatched'))
        UNION ALL
        (SELECT f.* FROM
           (SELECT t.id, t.kind::text AS kind, t.biz_id, t.state, t.result, t.due_at, t.attempts, t.last_error, t.shard_id,
                   t.created_at, t.finished_at
              FROM timeout_center.timeouts t
             WHERE t.kind = timeout_center.kind_or_null($1) AND t.biz_id = $2 AND t.state NOT IN ('pending', 'dispatched')
            UNION ALL
            SELECT d.id, d.kind, d.biz_id, 'done', d.result, d.due_at, d.attempts, d.last_error, d.shard_id,
                   d.created_at, d.finished_at
              FROM timeout_center.done_timeouts d
             WHERE d.kind = $1 AND d.biz_id = $2) f
          ORDER BY f.id DESC LIMIT 1)
        LIMIT 1) r
  LEFT JOIN timeout_center.shards s ON s.id = r.shard_id
