-- 0023_settle_external: settle on read for kinds whose handler runs outside the center's database
-- (issue 33): a SQL handler in a business database (handler.database or a routing rule), an HTTP
-- handler, a code handler. Their effect commits in another system than the timeout, and only the
-- shard protocol makes that exactly once (claim committed first, a marker keyed by the shard in
-- the business database, the business commit fenced by the shard's lease, the record under it:
-- worker/external-executor.ts). So settle runs such a timeout as a one-row shard through that
-- same protocol, not as a statement of its own:
--   1. timeout_center.settle_run(kind, biz_id, wait_ms, owner, lease_ms) (below) does what
--      timeout_center.settle did (the row's lock, due, pause, caps), and, for a kind whose handler
--      runs elsewhere, binds the row to a new shard in the same transaction: a one-shard scan
--      (scans.coordinator 'settle') and its shard, running, leased to `owner`, holding the row
--      (held_ids, as the external claim holds rows: no other claim takes it, a cancel is refused)
--      with claimed_at set (so its run takes back exactly that row and never claims another);
--   2. the caller (src/settle/settler.ts, the Node API's Settler and the HTTP API) runs the shard
--      with the workers' external executor: marker, handler, fenced commit, record;
--   3. reduce totals the scan like any other once its shard is final.
-- A settler that dies after 1 leaves a running shard whose lease runs out: the reaper requeues and
-- publishes it, and a worker runs it (a re-run: the marker says what the first run did).
-- The in-database path (a SQL handler in the database holding the timeout) is unchanged:
-- settle_run runs it as timeout_center.settle did; settle(kind, biz_id, wait_ms) is now
-- settle_run without an owner, and still answers 'unsupported' for a handler that runs elsewhere
-- (SQL cannot call an HTTP service or a business database; the message names the API).
-- New in both paths: a row held by a live shard of the external path (pending, in its held_ids)
-- answers 'busy' with that shard, as a dispatched row does.
--
-- shards.settled_by: who settled it (timeout_center.current_actor()) for a settle's shard, NULL for
-- the map's. The history row of a timeout a settle's shard applied has that shard_id, and
-- settled_by stamped by the settler right after the record (settler.ts; a settler that dies in
-- between leaves it NULL there, and the shard still names it).

ALTER TABLE timeout_center.shards ADD COLUMN settled_by text;
COMMENT ON COLUMN timeout_center.shards.settled_by IS
  'a settle''s one-row shard (sql/0023): who settled it; NULL for the map''s shards';

-- settle_run(kind, biz_id, wait_ms, owner, lease_ms): timeout_center.settle's work (sql/0021
-- describes each outcome), plus, when owner is given and the kind's handler runs elsewhere,
-- 'bound': the row now belongs to shard shard_id of scan scan_id, running under lease_token for
-- lease_ms; the caller runs it (owner NULL: 'unsupported' there, as before).
CREATE FUNCTION timeout_center.settle_run(p_kind text, p_biz_id text, p_wait_ms integer, p_owner text, p_lease_ms integer)
RETURNS TABLE (outcome text, timeout_id bigint, state text, due_at timestamptz, available_at timestamptz,
               result text, shard_id bigint, detail text, scan_id bigint, lease_token uuid)
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
  v_holder    bigint;
  v_scan      bigint;
  v_shard     bigint;
  v_token     uuid;
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
                        format('no live timeout of %s %s (never scheduled, or final already)', p_kind, p_biz_id), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  BEGIN
    IF p_wait_ms > 0 THEN
      PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
      SELECT tt.id, tt.state, tt.due_at, tt.available_at, tt.shard_id, tt.result, tt.biz_id, tt.payload, tt.target INTO t
        FROM timeout_center.timeouts tt WHERE tt.id = v_id FOR UPDATE;
      v_found := FOUND;
    ELSE
      SELECT tt.id, tt.state, tt.due_at, tt.available_at, tt.shard_id, tt.result, tt.biz_id, tt.payload, tt.target INTO t
        FROM timeout_center.timeouts tt WHERE tt.id = v_id FOR UPDATE NOWAIT;
      v_found := FOUND;
    END IF;
    PERFORM set_config('lock_timeout', v_lock, true);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM set_config('lock_timeout', v_lock, true);
    RETURN QUERY SELECT 'busy', v_id, 'pending'::text, NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::bigint,
                        format('a worker''s shard (or a payer) holds the row; it did not let go within %s ms', greatest(p_wait_ms, 0)), NULL::bigint, NULL::uuid;
    RETURN;
  END;
  IF NOT v_found THEN
    -- Moved to the history while this waited: a shard applied it.
    SELECT dd.due_at, dd.result, dd.shard_id, dd.settled_by INTO d FROM timeout_center.done_timeouts dd WHERE dd.id = v_id;
    RETURN QUERY SELECT 'already_final', v_id, 'done'::text, d.due_at, NULL::timestamptz, d.result, d.shard_id,
                        CASE WHEN d.settled_by IS NOT NULL THEN format('settled by %s', d.settled_by)
                             ELSE format('applied by shard %s', d.shard_id) END, NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  IF t.state NOT IN ('pending', 'dispatched') THEN
    RETURN QUERY SELECT 'already_final', t.id, t.state, t.due_at, NULL::timestamptz, t.result, t.shard_id, format('%s while settle waited', t.state), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  IF t.state = 'dispatched' THEN
    RETURN QUERY SELECT 'busy', t.id, t.state, t.due_at, t.available_at, NULL::text, t.shard_id,
                        format('dispatched to shard %s, which applies it', t.shard_id), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  -- Held by a live shard of the external path (sql/0020: its claim committed, the row stays
  -- pending until that shard's record). A fresh snapshot: a claim that committed while this
  -- waited for the row's lock is seen.
  SELECT sh.id INTO v_holder FROM timeout_center.shards sh
   WHERE sh.kind = p_kind AND sh.held_ids IS NOT NULL AND sh.state IN ('queued', 'running') AND t.id = ANY (sh.held_ids)
   LIMIT 1;
  IF v_holder IS NOT NULL THEN
    RETURN QUERY SELECT 'busy', t.id, t.state, t.due_at, t.available_at, NULL::text, v_holder,
                        format('held by shard %s, which applies it', v_holder), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  v_now := statement_timestamp();
  -- The kind's controls as they are now (an operator may have paused it while this waited).
  SELECT * INTO k FROM timeout_center.kinds kk WHERE kk.kind = p_kind;
  IF t.available_at > v_now THEN
    RETURN QUERY SELECT 'not_due', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                        CASE WHEN t.available_at > t.due_at THEN 'backing off after a failed attempt' ELSE 'not due yet' END, NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  IF k.paused THEN
    RETURN QUERY SELECT 'paused', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint, format('kind %s is paused', p_kind), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  IF k.max_running_shards IS NOT NULL THEN
    -- lock_kind.sql's lock: workers taking a shard of this kind wait until this transaction ends,
    -- so the running shards counted here plus this settle stay within the cap.
    PERFORM 1 FROM timeout_center.kinds kk WHERE kk.kind = p_kind FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM timeout_center.shards sh WHERE sh.kind = p_kind AND sh.state = 'running') >= k.max_running_shards THEN
      RETURN QUERY SELECT 'limited', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                          format('kind %s runs %s shards, its max_running_shards', p_kind, k.max_running_shards), NULL::bigint, NULL::uuid;
      RETURN;
    END IF;
  END IF;
  IF k.rate_limit IS NOT NULL
     AND (SELECT count(*) FROM timeout_center.done_timeouts dd
           WHERE dd.finished_at > v_now - interval '1 second' AND dd.kind = p_kind) >= k.rate_limit THEN
    RETURN QUERY SELECT 'limited', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                        format('kind %s applied %s timeouts in the last second, its rate_limit', p_kind, k.rate_limit), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  IF k.settle_statement IS NULL AND p_owner IS NULL THEN
    RETURN QUERY SELECT 'unsupported', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                        format('the %s handler of kind %s does not run in this database: settle it through the API (Node: Settler.settle; HTTP: POST /v1/timeouts/{kind}/{bizId}/settle), or let the scan apply it',
                               k.handler_type, p_kind), NULL::bigint, NULL::uuid;
    RETURN;
  END IF;
  IF k.settle_statement IS NULL THEN
    -- The handler runs elsewhere: bind the row to a one-row shard of a one-shard scan, leased to
    -- p_owner, as the external claim holds rows (held_ids; claimed_at set, so its run takes back
    -- exactly this row and claims nothing else). The caller runs it through the shard protocol
    -- (worker/external-executor.ts) once this commits.
    INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, shard_count, mapped_at)
    VALUES ((SELECT cl.epoch FROM timeout_center.coordinator_lease cl WHERE cl.id = 1), 'settle', v_now, 'mapped', 1, clock_timestamp())
    RETURNING id INTO v_scan;
    INSERT INTO timeout_center.shards (scan_id, kind, target, seq, size, claim_limit, state, attempts, owner, lease_token,
                                       lease_expires_at, started_at, published_at, claimed_at, held_ids, settled_by)
    VALUES (v_scan, p_kind,
            -- the shard's target as the map writes it: the row's own (a routed kind), or the
            -- kind's one business database; NULL for HTTP and code handlers
            coalesce(t.target, (SELECT r.databases[1] FROM timeout_center.kind_routes r WHERE r.kind = p_kind AND r.route_by = 'database')),
            0, 0, 1, 'running', 1, p_owner, gen_random_uuid(),
            clock_timestamp() + p_lease_ms * interval '1 millisecond', clock_timestamp(), clock_timestamp(), clock_timestamp(),
            ARRAY[t.id], timeout_center.current_actor())
    RETURNING id, shards.lease_token INTO v_shard, v_token;
    RETURN QUERY SELECT 'bound', t.id, t.state, t.due_at, t.available_at, NULL::text, v_shard,
                        format('bound to shard %s of settle scan %s', v_shard, v_scan), v_scan, v_token;
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
                          'the handler waited more than 100 ms on a lock of the object (a payer holds it); nothing changed', NULL::bigint, NULL::uuid;
      RETURN;
    WHEN OTHERS THEN
      PERFORM set_config('lock_timeout', v_lock, true);
      RETURN QUERY SELECT 'failed', t.id, t.state, t.due_at, t.available_at, NULL::text, NULL::bigint,
                          format('the handler failed: %s (%s); nothing changed, the scan applies it with retries', SQLERRM, SQLSTATE), NULL::bigint, NULL::uuid;
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
                      format('settled by %s', timeout_center.current_actor()), NULL::bigint, NULL::uuid;
END $$;

COMMENT ON FUNCTION timeout_center.settle_run(text, text, integer, text, integer) IS
  'settle''s work (sql/0021, sql/0023); with an owner, a kind whose handler runs elsewhere is bound to a one-row shard leased to it (bound)';

-- settle keeps its signature and answers; its body is settle_run without an owner.
CREATE OR REPLACE FUNCTION timeout_center.settle(p_kind text, p_biz_id text, p_wait_ms integer DEFAULT 1000)
RETURNS TABLE (outcome text, timeout_id bigint, state text, due_at timestamptz, available_at timestamptz,
               result text, shard_id bigint, detail text)
LANGUAGE sql VOLATILE AS $$
  SELECT r.outcome, r.timeout_id, r.state, r.due_at, r.available_at, r.result, r.shard_id, r.detail
    FROM timeout_center.settle_run(p_kind, p_biz_id, p_wait_ms, NULL, NULL) r
$$;
