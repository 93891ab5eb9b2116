-- store_of: the store a kind's timeout of this business id belongs in (sql/0014): NULL for the
-- center's database, a store name, or '-unroutable' when the kind's rule cannot place the id.
-- The rule is in every database of the fleet, so any of them answers.
--   $1 kind   $2 biz_id
-- @params kind: string, bizId: string
-- Returns store (text or NULL).
SELECT timeout_center.store_of($1::text, $2::text) AS store
