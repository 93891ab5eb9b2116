-- place_biz_ids: the store of each business id under a kind's store rule (the config's, passed in:
-- no rule table is read), by the same route_target the insert check and the map use (sql/0005),
-- so an operator's cancel goes where the timeout is. '-unroutable' when the rule cannot place it.
--   $1 route_by, $2 databases, $3 range_from, $4 range_to (the rule), $5 the business ids
-- @params by: string, databases: string[], from: string[] | null, to: string[] | null, bizIds: string[]
-- Returns biz_id, store.
SELECT b AS biz_id, timeout_center.route_target($1::text, $2::text[], $3::bigint[], $4::bigint[], b) AS store
  FROM unnest($5::text[]) AS b
