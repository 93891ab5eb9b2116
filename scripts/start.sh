#!/bin/sh
# `npm start`: migrate, then run coordinator + worker in one process, with local defaults for
# anything not set. Production runs `timeout-center coordinator` / `worker` with explicit settings.
set -e
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
export TIMEOUT_CENTER_CONFIG="${TIMEOUT_CENTER_CONFIG:-config.example.yaml}"
echo "timeout-center: DATABASE_URL=$(echo "$DATABASE_URL" | sed -E 's#//([^:@/]*):[^@/]*@#//\1:***@#') REDIS_URL=$REDIS_URL config=$TIMEOUT_CENTER_CONFIG" >&2
node dist/cli/main.js migrate
# The example config's handlers update an `orders` table; create it if this database has none.
node -e "
const pg = require('pg');
const c = new pg.Client(process.env.DATABASE_URL);
c.connect().then(() => c.query(\"CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz)\")).then(() => c.end(), (e) => { console.error('timeout-center: could not create the example orders table: ' + e.message); process.exit(1); });
"
exec node dist/cli/main.js run --port "${PORT:-9464}"
