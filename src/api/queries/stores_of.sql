-- stores_of: the store each (kind, biz_id) belongs in (timeout_center.store_of, sql/0014), for a
-- batch in one round trip: NULL for the center's database, a store name, or '-unroutable'.
--   $1 kinds   $2 biz_ids
-- @params kinds: string[], bizIds: string[]
-- Returns ord (1-based), store.
SELECT i.ord::int AS ord, timeout_center.store_of(i.kind, i.biz_id) AS store
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS i(kind, biz_id, ord)
 ORDER BY i.ord
