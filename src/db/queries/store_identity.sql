-- store_identity: which store this database is (sql/0014): no row in the center's database.
-- Returns store (text).
SELECT store FROM timeout_center.store_identity
