-- 0054_late_rows_by_writer: the rows written late, found by who wrote them (issue 45,
-- docs/vacuum-horizon.md).
--
-- A row written pending more than a second after its available_at (written_late, sql/0030) can be
-- due before any claim floor, so every tick probes for the oldest of them apart. That probe read
-- timeouts_written_late (kind, available_at) from the kind's start: while an old snapshot was held,
-- every row written late and claimed since stayed in front of it, and a workload that writes most of
-- its timeouts already due paid for all of them at every tick (3 million: 48,553 buffers, 420-480
-- ms a tick).
--
-- Only the rows the previous tick could not see need the probe: a row it saw is still pending with
-- the key it had then (a write that moves the key or makes it pending again marks it anew), so it
-- is at or above that tick's floor and the walk from that floor finds it. A row the previous tick
-- could not see was written by a transaction running then or begun since: its transaction id is at
-- least that tick's pg_snapshot_xmin. So the trigger records the writing transaction's id beside the
-- mark (written_xid), 0055 indexes the pending rows written late by it, and the probe
-- (pending_late_first) reads from the previous tick's xmin on: the rows written late since, live or
-- claimed, and no older. A row written late by code before this migration has no written_xid
-- (NULL), and one written by a transaction that began before it and commits after would be seen by
-- no tick yet: the probe reads those too (their number is fixed at the migration).
--
-- Online: one column without a default (a catalog change), the two trigger functions replaced,
-- one function added; 0055 builds the index concurrently. The previous release runs unchanged: its
-- probe reads timeouts_written_late, which stays, and the trigger fills written_xid whoever writes.

ALTER TABLE timeout_center.timeouts ADD COLUMN written_xid xid8;
COMMENT ON COLUMN timeout_center.timeouts.written_xid IS
  'the transaction that wrote the row pending late (written_late; NULL otherwise, or written before sql/0054): the claim floors probe the rows written late since their previous tick by it; set by trigger';

-- 0030's function with written_xid beside written_late; unchanged otherwise.
CREATE OR REPLACE FUNCTION timeout_center.timeouts_before_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.available_at := NEW.due_at;
    IF NEW.state IS DISTINCT FROM 'pending' THEN
      RAISE EXCEPTION 'timeout_center.timeouts: a new timeout must be inserted as pending, not %', NEW.state
        USING ERRCODE = 'check_violation', HINT = 'leave the state column out of the INSERT';
    END IF;
    -- The transaction's id first, then the clock (sql/0030: the floor's marks).
    NEW.written_xid := pg_current_xact_id();
    NEW.written_late := NEW.available_at < clock_timestamp() - interval '1 second';
    IF NOT NEW.written_late THEN
      NEW.written_xid := NULL;
    END IF;
  ELSIF NEW.due_at IS DISTINCT FROM OLD.due_at THEN
    -- Rescheduling: only a pending timeout moves; an in-flight one is already being applied.
    IF OLD.state <> 'pending' THEN
      RAISE EXCEPTION 'timeout_center.timeouts: timeout % (% %) is %, only a pending timeout can be rescheduled',
        OLD.id, OLD.kind, OLD.biz_id, OLD.state USING ERRCODE = 'check_violation';
    END IF;
    NEW.available_at := NEW.due_at;
    NEW.attempts := 0;
  END IF;
  RETURN NEW;
END $$;

-- 0030's function for an UPDATE that makes a row pending or moves its available_at, the same.
CREATE OR REPLACE FUNCTION timeout_center.timeouts_mark_written_late() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.written_xid := pg_current_xact_id();
  NEW.written_late := NEW.available_at < clock_timestamp() - interval '1 second';
  IF NOT NEW.written_late THEN
    NEW.written_xid := NULL;
  END IF;
  RETURN NEW;
END $$;

-- The oldest available_at among a kind's pending rows written late by transactions from p_from_xid
-- on ('0': all of them, a first tick), or by a writer that recorded none (NULL). Its reads are
-- planned by themselves, as sql/0053's: with sorts off, each ordered subquery can only read
-- timeouts_written_late_by_xid from p_from_xid on (reading timeouts_written_late in due order and
-- filtering is the walk this replaces). PL/pgSQL, so that a session plans them once (a generic
-- plan from the sixth call), not at every tick: 4 buffers and 0.06 ms a call against 24 and 0.37
-- ms as a SQL function, on an empty table.
CREATE FUNCTION timeout_center.pending_late_first(p_kind timeout_center.kind, p_from_xid xid8)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN least((SELECT min(s.available_at)
                  FROM (SELECT t.available_at FROM timeout_center.timeouts t
                         WHERE t.kind = p_kind AND t.state = 'pending' AND t.written_late AND t.written_xid >= p_from_xid
                         ORDER BY t.written_xid) s),
               (SELECT min(s.available_at)
                  FROM (SELECT t.available_at FROM timeout_center.timeouts t
                         WHERE t.kind = p_kind AND t.state = 'pending' AND t.written_late AND t.written_xid IS NULL
                         ORDER BY t.written_xid) s));
END
$$;
COMMENT ON FUNCTION timeout_center.pending_late_first(timeout_center.kind, xid8) IS
  'the oldest available_at among a kind''s pending rows written late by transactions from p_from_xid on (0: all) or by code before sql/0054: the claim floors'' late probe (next_due.sql)';
