-- sync_stores: writes the store rules of kinds stored beside their orders into
-- timeout_center.kind_stores (sql/0014; routes.ts, at every start, in the center and in every store):
-- a rule of a kind in the config that is no longer stored beside is dropped;
-- an unchanged rule is not written.
--   $1 routes: [{kind, route_by, databases, range_from, range_to}] (jsonb)   $2 the config's kinds (text[])
-- @params routes: string, kinds: string[]
WITH wanted AS (
  SELECT r.kind, r.route_by, (SELECT array_agg(x ORDER BY o) FROM jsonb_array_elements_text(r.databases) WITH ORDINALITY e (x, o)) AS databases,
         (SELECT array_agg(x::bigint ORDER BY o) FROM jsonb_array_elements_text(r.range_from) WITH ORDINALITY e (x, o)) AS range_from,
         (SELECT array_agg(x::bigint ORDER BY o) FROM jsonb_array_elements_text(r.range_to) WITH ORDINALITY e (x, o)) AS range_to
    FROM jsonb_to_recordset($1::jsonb) AS r (kind text, route_by text, databases jsonb, range_from jsonb, range_to jsonb)
), dropped AS (
  DELETE FROM timeout_center.kind_stores k WHERE k.kind = ANY ($2::text[]) AND NOT EXISTS (SELECT 1 FROM wanted w WHERE w.kind = k.kind)
)
INSERT INTO timeout_center.kind_stores AS k (kind, route_by, databases, range_from, range_to)
SELECT kind, route_by, databases, range_from, range_to FROM wanted
ON CONFLICT (kind) DO UPDATE SET route_by = EXCLUDED.route_by, databases = EXCLUDED.databases,
  range_from = EXCLUDED.range_from, range_to = EXCLUDED.range_to, updated_at = now()
WHERE (k.route_by, k.databases, k.range_from, k.range_to) IS DISTINCT FROM (EXCLUDED.route_by, EXCLUDED.databases, EXCLUDED.range_from, EXCLUDED.range_to)
