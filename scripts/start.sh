#!/bin/sh
# `npm start`: build, migrate, then run coordinator + worker in one process, with local defaults for
# anything not set. Production runs `timeout-center coordinator` / `worker` with explicit settings.
#
# One process tree that stops as one: npm forwards SIGTERM/SIGINT to this script, so every step
# before the last runs in the background while the script waits on it with the signal trapped, and
# a signal is passed on to the step (a plain foreground child would be left running when the shell
# dies: a migrate waiting on its lock, say). The last step replaces the script (exec), so the
# signal reaches the server itself, which drains and exits.
set -e
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
export TIMEOUT_CENTER_CONFIG="${TIMEOUT_CENTER_CONFIG:-config.example.yaml}"

step_pid=
pass_on() {
  trap - TERM INT
  if [ -n "$step_pid" ]; then
    kill -"$1" "$step_pid" 2>/dev/null || true
    wait "$step_pid" 2>/dev/null || true
  fi
  echo "timeout-center: stopped by SIG$1 before the server started" >&2
  exit "$2"
}
trap 'pass_on TERM 143' TERM
trap 'pass_on INT 130' INT

# Runs one step in the background and waits for it, so a trapped signal interrupts the wait.
step() {
  "$@" &
  step_pid=$!
  status=0
  wait "$step_pid" || status=$?
  step_pid=
  return "$status"
}

step node scripts/compile-sql.mjs
step node node_modules/@typescript/native/bin/tsc -p tsconfig.build.json
echo "timeout-center: DATABASE_URL=$(echo "$DATABASE_URL" | sed -E 's#//([^:@/]*):[^@/]*@#//\1:***@#') REDIS_URL=$REDIS_URL config=$TIMEOUT_CENTER_CONFIG" >&2
step node dist/cli/main.js migrate
# The example config's handlers update an `orders` table; create it if this database has none.
step node -e "
const pg = require('pg');
const c = new pg.Client(process.env.DATABASE_URL);
c.connect().then(() => c.query(\"CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz)\")).then(() => c.end(), (e) => { console.error('timeout-center: could not create the example orders table: ' + e.message); process.exit(1); });
"
trap - TERM INT
exec node dist/cli/main.js run --port "${PORT:-9464}"
