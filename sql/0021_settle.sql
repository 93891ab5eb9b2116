-- 0021_settle: settle on read (issue 33). A reader that meets an overdue, still-open order applies
-- its timeout now, with the kind's own handler and guard and the claim's row lock, instead of
-- waiting for the scan: SELECT * FROM timeout_center.settle('order.unpaid', '1001').
--
-- What it needs here:
--   - kinds.settle_statement: the kind's SQL handler, when it runs in this database (a SQL handler
--     without a database or route; in a store, a kind stored beside its orders), as the template
--     the function fills: the same statement the claim composes (worker/sql-handler.ts) inside
--     `WITH applied (v) AS (...)`, with its $1 and $2 made format() arguments (%1$s: the ids, %2$s:
--     the payloads, each an array literal PostgreSQL types as the handler's $n; %3$s: the biz_id).
--     Written by syncKinds from the config at migrate and every process start
--     (src/settle/settle-statement.ts); NULL for a handler that runs elsewhere (a business
--     database, HTTP, code): settle answers 'unsupported' there, and the scan applies them.
--   - done_timeouts.settled_by: the history row of a settled timeout has no shard (shard_id NULL)
--     and names who settled it (timeout_center.current_actor(): the session's
--     timeout_center.actor setting, else the database user). NULL for a shard's apply. The history
--     is not per pending timeout: a pending row is unchanged (npm run bench:storage).

ALTER TABLE timeout_center.kinds ADD COLUMN settle_statement text;
COMMENT ON COLUMN timeout_center.kinds.settle_statement IS
  'the kind''s SQL handler as timeout_center.settle runs it (a format() template: %1$s ids, %2$s payloads, %3$s biz_id); NULL: the handler does not run in this database';

ALTER TABLE timeout_center.done_timeouts ADD COLUMN settled_by text;
COMMENT ON COLUMN timeout_center.done_timeouts.settled_by IS
  'who applied it through timeout_center.settle (shard_id is then NULL); NULL: a shard applied it';

-- all_timeouts gains settled_by (appended: CREATE OR REPLACE keeps the columns in place).
CREATE OR REPLACE VIEW timeout_center.all_timeouts AS
SELECT t.id, t.kind::text AS kind, t.biz_id, t.due_at, t.payload, t.state, t.available_at, t.attempts, t.shard_id,
       t.result, t.last_error, t.created_at, t.finished_at, NULL::text AS settled_by
  FROM timeout_center.timeouts t
UNION ALL
SELECT d.id, d.kind, d.biz_id, d.due_at, d.payload, 'done', d.finished_at, d.attempts, d.shard_id,
       d.result, d.last_error, d.created_at, d.finished_at, d.settled_by
  FROM timeout_center.done_timeouts d;

-- settle(kind, biz_id, wait_ms): applies the live timeout of (kind, biz_id) now if it is due, and
-- answers what happened (one row):
--   applied        the handler changed the object; the timeout is done (applied), settled_by set
--   skipped        the handler's guard refused (e.g. already paid); done (skipped), settled_by set
--   not_due        pending, not due yet (or backing off after a failure until available_at)
--   paused         the kind is paused: nothing of it starts, settle included
--   limited        the kind is at its cap: max_running_shards shards running, or rate_limit
--                  timeouts applied in the last second; the scan applies it within its limits
--   busy           a worker holds it: its shard's transaction has the row locked (for longer than
--                  wait_ms), or it is dispatched to a shard (the external path, a re-run), or the
--                  handler waited on a lock of the object (a payer) past 100 ms; nothing changed
--   already_final  it went final while settle waited for a worker or a payer (done by its shard,
--                  cancelled, failed): result and shard_id say how
--   not_found      no live timeout of (kind, biz_id): never scheduled, or final already. The
--                  history (done_timeouts) is not searched by biz_id: it has no index for it, on
--                  purpose (every close would write one); all_timeouts shows it
--   unsupported    the kind's handler does not run in this database (business database, HTTP,
--                  code): the Node API's settle() or the scan applies it
--   failed         the handler raised an error: its effect is rolled back (a savepoint), the
--                  timeout is left as it was (no attempt counted) for the scan, detail says why
-- It takes the claim's row lock: FOR UPDATE on the timeout row, waiting at most wait_ms (0: NOWAIT)
-- for a worker's shard transaction or a payer's cancel that holds it. A worker's claim passes over
-- a row settle holds (SKIP LOCKED), and settle finds a row a worker committed gone: one effect.
-- Call it in a transaction of its own (autocommit is fine), or first in yours, before touching the
-- order (the payment protocol's lock order): the row stays locked until that transaction ends, and
-- for a capped kind (max_running_shards) the kind's row too, which workers taking a shard of that
-- kind wait for. The handler runs with lock_timeout 100 ms (the worker's HANDLER_LOCK_TIMEOUT_MS).
CREATE FUNCTION timeout_center.settle(p_kind text, p_biz_id text, p_wait_ms integer DEFAULT 1000)
RETURNS TABLE (outcome text, timeout_id bigint, state text, due_at timestamptz, available_at timestamptz,
               result text, shard_id bigint, detail text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k           timeout_center.kinds%ROWTYPE;
  v_id        bigint;
  t           record;
  d           record;
  v_lock      text := current_setting('lock_timeout');
  v_applied   integer;
  v_result    text;
  v_now       timestamptz;
  v_found     boolean;
BEGIN
  IF p_kind IS NULL OR p_biz_id IS NULL THEN
    RAISE EXCEPTION 'timeout_center.settle: kind and biz_id are required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT * INTO k FROM timeout_center.kinds kk WHERE kk.kind = p_kind;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'unknown timeout kind "%": declare it under kinds: in the timeout-center config and run `timeout-center migrate` (nothing was written)', p_kind
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  -- The live row (the index timeouts_one_live_per_biz), then its lock, by id: a row that goes
  -- final while this waits is told apart from one that never was.
  SELECT tt.id INTO v_id FROM timeout_center.timeouts tt
   WHERE tt.kind = timeout_center.kind_or_null(p_kind) AND tt.biz_id = p_biz_id AND tt.state IN ('pending', 'dispatched');
  IF v_id IS NULL THEN
    RETURN QUERY SELECT 'not_found', NULL::bigint, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::bigint,
                        format('no live timeout of %s %s (never scheduled, or final already)', p_kind, p_biz_id);
    RETURN;
  END IF;
  BEGIN
    IF p_wait_ms > 0 THEN
      PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
      SELECT tt.id, tt.state, tt.due_at, tt.available_at, tt.shard_id, tt.result, tt.biz_id, tt.payload INTO t
        FROM timeout_center.timeouts tt WHERE tt.id = v_id FOR UPDATE;
      v_found := FOUND;
    ELSE
      SELECT tt.id, tt.state, tt.due_at, tt.available_at, tt.shard_id, tt.result, tt.biz_id, tt.payload INTO t
        FROM timeout_center.timeouts tt WHERE tt.id = v_id FOR UPDATE NOWAIT;
      v_found := FOUND;
    END IF;
    PERFORM set_config('lock_timeout', v_lock, true);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM set_config('lock_timeout', v_lock, true);
    RETURN QUERY SELECT 'busy', v_id, 'pending'::text, NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::bigint,
                        format('a worker''s shard (or a payer) holds the row; it did not let go within %s ms', greatest(p_wait_ms, 0));
    RETURN;
  END;
  IF NOT v_found THEN
    -- Moved to the history while this waited: a shard applied it.
    SELECT dd.due_at, dd.result, dd.shard_id, dd.settled_by INTO d FROM timeout_center.done_timeouts dd WHERE dd.id = v_id;
    RETURN QUERY SELECT 'already_final', v_id, 'done'::text, d.due_at, NULL::timestamptz, d.result, d.shard_id,
                        CASE WHEN d.settled_by IS NOT NULL THEN format('settled by %s', d.settled_by)
                             ELSE format('applied by shard %s', d.shard_id) END;
    RETURN;
  END IF;
  IF t.state NOT IN ('pending', 'dispatched') THEN
    RETURN QUERY SELECT 'already_final', t.id, t.state, t.due_at, NULL::timestamptz, t.result, t.shard_id, format('%s while settle waited', t.state);
    RETURN;
  END IF;
  IF t.state = 'dispatched' THEN
    RETURN QUERY SELECT 'busy', t.id, t.state, t.due_at, t.available_at, NULL::text, t.shard_id,
                        format('dispatched to shard %s, which applies it', t.shard_id);
    RETURN;
  END IF;
  v_now := statement_timestamp();
  -- The kind's controls as they are now (an operator may have paused it while this waited).
  SELECT * INTO k FROM timeout_center.kinds kk WHERE kk.kind = p_kind;
  IF t.available_at > v_now THEN
    RETURN QUERY SELECT 'not_due', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                        CASE WHEN t.available_at > t.due_at THEN 'backing off after a failed attempt' ELSE 'not due yet' END;
    RETURN;
  END IF;
  IF k.paused THEN
    RETURN QUERY SELECT 'paused', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint, format('kind %s is paused', p_kind);
    RETURN;
  END IF;
  IF k.max_running_shards IS NOT NULL THEN
    -- lock_kind.sql's lock: workers taking a shard of this kind wait until this transaction ends,
    -- so the running shards counted here plus this settle stay within the cap.
    PERFORM 1 FROM timeout_center.kinds kk WHERE kk.kind = p_kind FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM timeout_center.shards sh WHERE sh.kind = p_kind AND sh.state = 'running') >= k.max_running_shards THEN
      RETURN QUERY SELECT 'limited', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                          format('kind %s runs %s shards, its max_running_shards', p_kind, k.max_running_shards);
      RETURN;
    END IF;
  END IF;
  IF k.rate_limit IS NOT NULL
     AND (SELECT count(*) FROM timeout_center.done_timeouts dd
           WHERE dd.finished_at > v_now - interval '1 second' AND dd.kind = p_kind) >= k.rate_limit THEN
    RETURN QUERY SELECT 'limited', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                        format('kind %s applied %s timeouts in the last second, its rate_limit', p_kind, k.rate_limit);
    RETURN;
  END IF;
  IF k.settle_statement IS NULL THEN
    RETURN QUERY SELECT 'unsupported', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                        format('the %s handler of kind %s does not run in this database: settle it with the Node API, or let the scan apply it',
                               k.handler_type, p_kind);
    RETURN;
  END IF;

  -- The handler, in a savepoint (this block): an error undoes its effect and leaves the row as it was.
  BEGIN
    PERFORM set_config('lock_timeout', '100ms', true);
    EXECUTE format(k.settle_statement, quote_literal(ARRAY[t.biz_id]::text), quote_literal(ARRAY[t.payload::text]::text), quote_literal(t.biz_id))
       INTO v_applied;
    PERFORM set_config('lock_timeout', v_lock, true);
  EXCEPTION
    WHEN lock_not_available THEN
      PERFORM set_config('lock_timeout', v_lock, true);
      RETURN QUERY SELECT 'busy', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                          'the handler waited more than 100 ms on a lock of the object (a payer holds it); nothing changed';
      RETURN;
    WHEN OTHERS THEN
      PERFORM set_config('lock_timeout', v_lock, true);
      RETURN QUERY SELECT 'failed', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                          format('the handler failed: %s (%s); nothing changed, the scan applies it with retries', SQLERRM, SQLSTATE);
      RETURN;
  END;
  v_result := CASE WHEN v_applied > 0 THEN 'applied' ELSE 'skipped' END;

  -- The record: the row leaves timeouts for the history, as a shard's claim moves it (claim.sql),
  -- with no shard and the settler's name.
  WITH taken AS (
    DELETE FROM timeout_center.timeouts tt WHERE tt.id = t.id
    RETURNING tt.id, tt.kind, tt.biz_id, tt.due_at, tt.payload, tt.attempts, tt.last_error, tt.created_at
  )
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at,
                                            finished_at, settled_by)
  SELECT tk.id, tk.kind::text, tk.biz_id, tk.due_at, tk.payload, tk.attempts + 1, NULL, v_result, tk.last_error, tk.created_at,
         clock_timestamp(), timeout_center.current_actor()
    FROM taken tk;
  RETURN QUERY SELECT v_result, t.id, 'done'::text, t.due_at, t.available_at, v_result, NULL::bigint,
                      format('settled by %s', timeout_center.current_actor());
END $$;

COMMENT ON FUNCTION timeout_center.settle(text, text, integer) IS
  'applies the live timeout of (kind, biz_id) now if due, with the kind''s handler and guard and the claim''s row lock; answers applied, skipped, not_due, paused, limited, busy, already_final, not_found, unsupported or failed';
