-- The example shop's orders table (the one the handlers in deploy/config/timeout-center.yaml and
-- config.example.yaml update). Runs once, when the compose PostgreSQL volume is first created; the
-- workers check their handlers' SQL at start, so the table has to exist before they do.
CREATE TABLE IF NOT EXISTS orders (
  id         bigint PRIMARY KEY,
  status     text NOT NULL,
  closed_at  timestamptz
);
