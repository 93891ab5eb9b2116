-- business_markers: what the center needs in each business database (`timeout-center migrate`
-- runs it there; idempotent). The external path inserts one row per shard run first in the
-- transaction that applies the handler's effect (the key fences every other run of the shard),
-- and deletes it once the center recorded the outcome; a re-run after a crash between the two
-- commits finds it and records what the first run did.
-- Same shape as timeout_center.markers in the center (sql/0005_business_databases.sql).
CREATE SCHEMA IF NOT EXISTS timeout_center;
CREATE TABLE IF NOT EXISTS timeout_center.markers (
  shard_id          bigint PRIMARY KEY,
  lease_token       uuid NOT NULL,
  applied           text[] NOT NULL,
  failed_ids        text[] NOT NULL DEFAULT '{}',
  failed_errors     text[] NOT NULL DEFAULT '{}',
  failed_permanent  boolean[] NOT NULL DEFAULT '{}',
  created_at        timestamptz NOT NULL DEFAULT now()
);
-- The biz_ids the run handled (sql/0012_external_fencing.sql); NULL in markers of older versions.
ALTER TABLE timeout_center.markers ADD COLUMN IF NOT EXISTS ran text[];
