-- 0003_worker_claim: each timeout is written once on the way to done.
--
-- Until now the coordinator's map rewrote every due row (pending -> dispatched, with its shard)
-- and the worker rewrote it again (dispatched -> done). Neither write could be HOT, so a burst
-- paid two full row versions and their index entries per timeout. Now the map only counts what is
-- due and writes shard rows with a claim limit; the worker claims up to that many due rows of the
-- shard's kind inside its shard transaction (FOR UPDATE SKIP LOCKED, in due order) and marks them
-- done in the same write. `dispatched` remains for one path: a shard run again after its worker
-- died first pins its rows (committed), so a shard that keeps killing workers is abandoned with
-- the rows it held instead of passing them to the next shard.

-- How many due timeouts the shard may claim (set by the map). `size` becomes what it claimed.
ALTER TABLE timeout_center.shards ADD COLUMN claim_limit integer;
UPDATE timeout_center.shards SET claim_limit = size;
ALTER TABLE timeout_center.shards ALTER COLUMN claim_limit SET NOT NULL;
ALTER TABLE timeout_center.shards ADD CONSTRAINT shards_claim_limit_positive CHECK (claim_limit > 0);

-- Workers claim per kind in due order; the map counts per kind. kind leads so that one kind's
-- backlog never makes another kind's claim walk past it.
CREATE INDEX timeouts_due_by_kind ON timeout_center.timeouts (kind, available_at) WHERE state = 'pending';
DROP INDEX timeout_center.timeouts_claimable;

-- The backlog reads the new index one kind at a time (a range per kind; future rows cost nothing).
-- pending_due includes rows a running shard is applying right now: they stay pending to every
-- other session until that shard commits. in_flight counts rows pinned to a re-run shard.
CREATE OR REPLACE VIEW timeout_center.backlog AS
SELECT k.kind, p.pending_due, f.in_flight,
       least(p.oldest_due_at, f.oldest_due_at) AS oldest_due_at,
       now() - least(p.oldest_due_at, f.oldest_due_at) AS oldest_lag
  FROM timeout_center.kinds k
 CROSS JOIN LATERAL (SELECT count(*) AS pending_due, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind AND t.state = 'pending' AND t.available_at <= now()) p
 CROSS JOIN LATERAL (SELECT count(*) AS in_flight, min(t.due_at) AS oldest_due_at
                       FROM timeout_center.timeouts t
                      WHERE t.kind = k.kind AND t.state = 'dispatched' AND t.shard_id IS NOT NULL) f
 WHERE p.pending_due > 0 OR f.in_flight > 0;

-- A scan's claimed count is known once its shards ran: reduce writes it; until then the view sums
-- what its finished shards claimed so far.
CREATE OR REPLACE VIEW timeout_center.scan_report AS
SELECT s.id AS scan_id, s.state, s.cutoff,
       CASE WHEN s.state = 'reduced' THEN s.claimed
            ELSE (SELECT coalesce(sum(sh.size), 0)::int FROM timeout_center.shards sh WHERE sh.scan_id = s.id) END AS claimed,
       s.shard_count,
       s.done, s.skipped, s.failed, s.retried,
       s.started_at, s.mapped_at, s.reduced_at,
       s.reduced_at - s.started_at AS duration,
       s.epoch, s.coordinator, s.failures
  FROM timeout_center.scans s;

CREATE OR REPLACE VIEW timeout_center.shard_report AS
SELECT sh.id AS shard_id, sh.scan_id, sh.kind, sh.size, sh.state, sh.attempts, sh.owner,
       sh.lease_expires_at, sh.done_count AS done, sh.skipped_count AS skipped,
       sh.failed_count AS failed, sh.retried_count AS retried, sh.error_sample,
       sh.created_at, sh.started_at, sh.finished_at,
       sh.finished_at - sh.started_at AS duration, sh.publish_count, sh.claim_limit
  FROM timeout_center.shards sh;
