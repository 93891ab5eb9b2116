-- 0012_external_fencing: the external path's history tells what the business database did.
--
-- On the external path (a handler in a business database, a code or an HTTP handler) a shard's
-- rows are claimed and committed (state dispatched) before the handler runs elsewhere, so no
-- timeout row is locked while the order is being closed. Three rules follow, each held here:
--
-- 1. A dispatched timeout cannot be cancelled. Its shard may be closing the order right now, in
--    another database: a cancel that answered "done" would let the payer go on while the order is
--    closed. The cancel changes nothing (UPDATE 0, cancel() returns false): it came too late, and
--    the payment's guarded UPDATE (`... AND status = 'unpaid'`) decides. Enforced by a trigger so
--    that any statement, including an older copy of the README's cancel that also matched
--    dispatched rows, gets the same answer. On the same-database path a dispatched row is one
--    pinned to a shard's re-run after its worker died: the same rule holds there.
--
-- 2. A shard that has claimed once never claims fresh rows (worker/queries/external_claim.sql):
--    a re-run takes back only the rows it holds, and its business database's marker says what the
--    earlier run did with them. claimed_at records that first claim.
--
-- 3. A marker names the rows its run handled (ran): a held row a marker does not cover goes back
--    to pending, never to skipped (worker/queries/external_record.sql). NULL (a marker written
--    before this migration): it covers every row its shard holds, as before.
ALTER TABLE timeout_center.shards ADD COLUMN claimed_at timestamptz;
COMMENT ON COLUMN timeout_center.shards.claimed_at IS 'external path: when the shard first claimed its rows; a re-run never claims fresh ones';

ALTER TABLE timeout_center.markers ADD COLUMN ran text[];
COMMENT ON COLUMN timeout_center.markers.ran IS 'the biz_ids the run handled (applied, failed or skipped); NULL: every row its shard holds';

CREATE FUNCTION timeout_center.refuse_late_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Too late: the shard holding this timeout may be applying it. Skip the row (UPDATE 0).
  RETURN NULL;
END $$;

CREATE TRIGGER timeouts_refuse_late_cancel
  BEFORE UPDATE OF state ON timeout_center.timeouts
  FOR EACH ROW WHEN (OLD.state = 'dispatched' AND NEW.state = 'cancelled')
  EXECUTE FUNCTION timeout_center.refuse_late_cancel();
