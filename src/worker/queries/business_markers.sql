-- business_markers: what the center needs in each business database (`timeout-center migrate`
-- runs it there; idempotent). The external path writes one row per shard run in the same
-- transaction as the handler's effect and deletes it once the center recorded the outcome; a
-- re-run after a crash between the two commits finds it and records what the first run did.
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
