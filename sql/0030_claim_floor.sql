-- 0030_claim_floor: claims that seek past what is already done (issue 45, docs/vacuum-horizon-figures.md).
--
-- While any transaction in the cluster holds an old snapshot (a report in REPEATABLE READ, a
-- pg_dump, a lagging logical slot, a standby with hot_standby_feedback), VACUUM cannot remove a
-- timeout deleted after that snapshot was taken, and nothing can mark its entry in
-- timeouts_due_by_kind dead. Each claim walked that index from the kind's first entry, fetching
-- every dead row's heap tuple to find it invisible: measured with 150,000 dead entries in front,
-- one claim of 500 rows read 2,290 buffers in 32 ms; seeking from the first live entry, 12
-- buffers in 0.1 ms. So the coordinator keeps, per kind, a claim floor: an available_at below
-- which no pending row of the kind can be claimed, computed at every tick (next_due.sql) by
-- walking only from the previous floor, and hands it to each shard it writes
-- (shards.claim_floor); every claim and every count of due rows seeks from it.
--
-- Why a floor skips nothing (docs/architecture.md "The claim floor"): a row is below a new floor
-- only if, when the floor was computed, it was (a) visible (then the walk from the old floor
-- found it, or it is "written late", below), or (b) written by a transaction not yet committed.
-- For (b) the coordinator records marks (the clock, then a new transaction id, in that order);
-- a floor is never above the latest mark older than every transaction running at the
-- computation (pg_snapshot_xmin), minus one second. A row is written after its transaction got
-- its id (the trigger below asks for the id before reading the clock), so a row not yet committed
-- was written after that mark; and a row whose available_at is more than a second before the
-- moment it was written pending is "written late" (a due time in the past, a reschedule to the
-- past, a retry whose transaction ran long, a dispatched row handed back): it is kept in a small
-- index of its own (0031) that every floor computation reads, so it is claimed at the next tick.
--
-- Online: two columns without a default (a catalog change each), a function replaced, one
-- trigger added. The previous release runs unchanged: it never reads claim_floor (its claims walk
-- from the start, as before) and the trigger fills written_late whoever writes.

ALTER TABLE timeout_center.timeouts ADD COLUMN written_late boolean;
COMMENT ON COLUMN timeout_center.timeouts.written_late IS
  'the row was written pending more than a second after its available_at (a due time in the past, a row handed back): the claim floors read these apart (sql/0030); set by trigger';

ALTER TABLE timeout_center.shards ADD COLUMN claim_floor timestamptz;
COMMENT ON COLUMN timeout_center.shards.claim_floor IS
  'the claim seeks the due index from here: no pending row of the kind below it was claimable when the shard was planned (sql/0030); NULL: from the start';

-- 0001's function with the written_late mark on INSERT; unchanged otherwise.
CREATE OR REPLACE FUNCTION timeout_center.timeouts_before_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.available_at := NEW.due_at;
    IF NEW.state IS DISTINCT FROM 'pending' THEN
      RAISE EXCEPTION 'timeout_center.timeouts: a new timeout must be inserted as pending, not %', NEW.state
        USING ERRCODE = 'check_violation', HINT = 'leave the state column out of the INSERT';
    END IF;
    -- The transaction's id first, then the clock (see the header: the floor's marks).
    PERFORM pg_current_xact_id();
    NEW.written_late := NEW.available_at < clock_timestamp() - interval '1 second';
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

-- An UPDATE that makes a row pending, or moves a pending row's available_at (a reschedule, a
-- retry's backoff, a row handed back or released): the same mark. Fires after
-- timeouts_before_write (triggers fire in name order), whose new available_at its WHEN sees; the
-- hot path (a claim's DELETE, a move to dispatched) does not fire it.
CREATE FUNCTION timeout_center.timeouts_mark_written_late() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_current_xact_id();
  NEW.written_late := NEW.available_at < clock_timestamp() - interval '1 second';
  RETURN NEW;
END $$;

CREATE TRIGGER timeouts_written_pending
  BEFORE UPDATE ON timeout_center.timeouts
  FOR EACH ROW WHEN (NEW.state = 'pending' AND (OLD.state <> 'pending' OR NEW.available_at <> OLD.available_at))
  EXECUTE FUNCTION timeout_center.timeouts_mark_written_late();
