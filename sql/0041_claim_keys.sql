-- 0041_claim_keys: claim floors that can pass into a flood's rows (issue 45).
--
-- 0030's floor is a time: a claim seeks the due index from the kind's floor, and the floor cannot
-- pass a due instant while any row due at it is pending. A flood's rows share one instant (200,000
-- orders created by one promotion and timed out together), so under an old snapshot held elsewhere
-- every claim of the flood still walked the flood's rows claimed before it, dead but not removable:
-- a 200,000 flood drained at 0.60x its rate (docs/vacuum-horizon-figures.md). The floor becomes a
-- key, (available_at, id), on an index ordered by both (0042): it passes the rows already claimed
-- within one instant too.
--
-- Floors are also refreshed on the shards that have not claimed yet (next_due.sql, every tick): a
-- flood mapped ahead writes all its shards before its instant, each with the floor of that moment;
-- refreshed, each claims from where the claims before it ended. The shards a flood claims newest
-- first (sql-handler.ts) get a ceiling the same way: the newest pending key due by the flood's
-- instant, so they pass the flood's newest rows already claimed. A ceiling only narrows what those
-- shards take; whatever it leaves is claimed oldest first, so no row depends on it.
--
-- Online: three nullable columns without a default (a catalog change each). The previous release
-- neither reads nor writes them.

ALTER TABLE timeout_center.shards ADD COLUMN claim_floor_id bigint;
COMMENT ON COLUMN timeout_center.shards.claim_floor_id IS
  'with claim_floor, the key (available_at, id) the claim seeks the due index from (sql/0041); NULL: the whole instant claim_floor';

ALTER TABLE timeout_center.shards ADD COLUMN claim_ceiling timestamptz;
ALTER TABLE timeout_center.shards ADD COLUMN claim_ceiling_id bigint;
COMMENT ON COLUMN timeout_center.shards.claim_ceiling IS
  'a flood shard claiming newest first starts from the key (claim_ceiling, claim_ceiling_id) instead of not_before (sql/0041); NULL: from not_before';
COMMENT ON COLUMN timeout_center.shards.claim_ceiling_id IS
  'see claim_ceiling';
