-- set_store_identity: names this database as a store (`migrate`, once per store database). A
-- database already named another store keeps its name: the caller sees the name it has, and
-- refuses to go on (a URL pointing at the wrong database).
--   $1 the store's name (a businessDatabases name)
-- @params store: string
-- Returns store: the name this database has now.
WITH ins AS (
  INSERT INTO timeout_center.store_identity (store) VALUES ($1)
  ON CONFLICT (only_one) DO NOTHING
  RETURNING store
)
SELECT store FROM ins
UNION ALL
SELECT store FROM timeout_center.store_identity WHERE NOT EXISTS (SELECT 1 FROM ins)
