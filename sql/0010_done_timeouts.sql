-- 0010_done_timeouts: a done timeout leaves the hot table.
--
-- Until now a timeout on its way to done was updated in place: a new row version in
-- timeout_center.timeouts with an entry in its primary key and in timeouts_purgeable, plus the
-- predicates of five partial indexes and the table's constraints evaluated for it. Measured with
-- the same drain statement (npm run bench:schema, bench/analysis.md): the index on finished_at
-- alone cost 13 % of the drain rate (every close inserts at its right-most page, so concurrent
-- shards queue on that one page), the rest of our layout another 10 %.
--
-- Now the worker deletes the row from timeout_center.timeouts and inserts it, with its result,
-- into timeout_center.done_timeouts, in the same statement (worker/queries/claim.sql; finish.sql
-- and external_record.sql on the other paths). A DELETE inserts no index entry and checks no
-- constraint; the history table is append-only, in the order timeouts finish, with one primary
-- key and a BRIN index on finished_at for retention (a few pages per million rows, and no
-- right-most-page contention). timeout_center.timeouts keeps what is live or needs a person:
-- pending, dispatched, failed, and cancelled (cancelled by the business service's own UPDATE).
--
-- Reading: timeout_center.all_timeouts is every timeout with its state, live or done. A payer
-- that waits on a row a worker is closing finds it gone after the worker commits (UPDATE 0), as it
-- found it done before.

CREATE TABLE timeout_center.done_timeouts (
  id           bigint PRIMARY KEY,
  kind         text NOT NULL,
  biz_id       text NOT NULL,
  due_at       timestamptz NOT NULL,
  payload      jsonb,
  attempts     integer NOT NULL,
  shard_id     bigint,
  -- 'applied' (the handler changed the object) or 'skipped' (nothing to change, e.g. already paid).
  result       text NOT NULL CHECK (result IN ('applied', 'skipped')),
  last_error   text,
  created_at   timestamptz NOT NULL,
  finished_at  timestamptz NOT NULL
);
-- Retention deletes done timeouts by age. Rows arrive in finish order, so a BRIN range's minimum
-- tells whether any of its rows is old enough; autosummarize keeps new ranges summarized.
CREATE INDEX done_timeouts_finished ON timeout_center.done_timeouts USING brin (finished_at)
  WITH (autosummarize = on);
-- The retention purge and the console's per-minute chart read by finished_at; the history's
-- shard look-ups (timeout-center shards, scans) go through shard_id rarely and tolerate a scan of
-- the BRIN-selected ranges. No other index: each one would be written by every close.

-- Done rows written before this migration move over, in one statement.
WITH moved AS (
  DELETE FROM timeout_center.timeouts WHERE state = 'done'
  RETURNING id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at
)
INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
SELECT id, kind, biz_id, due_at, payload, attempts, shard_id, coalesce(result, 'applied'), last_error, created_at,
       coalesce(finished_at, now())
  FROM moved;

-- Every timeout, live or done, with its state: what people inspect with SQL.
CREATE VIEW timeout_center.all_timeouts AS
SELECT t.id, t.kind, t.biz_id, t.due_at, t.payload, t.state, t.available_at, t.attempts, t.shard_id,
       t.result, t.last_error, t.created_at, t.finished_at
  FROM timeout_center.timeouts t
UNION ALL
SELECT d.id, d.kind, d.biz_id, d.due_at, d.payload, 'done', d.finished_at, d.attempts, d.shard_id,
       d.result, d.last_error, d.created_at, d.finished_at
  FROM timeout_center.done_timeouts d;
