-- 0031_claim_floor_index: the pending rows written late (sql/0030), which the claim floors read
-- apart at every tick: a row written pending more than a second after its available_at. Rare
-- (a due time in the past, a row handed back), so the index stays small; a row leaves it when
-- it leaves pending.
-- tc:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_written_late
  ON timeout_center.timeouts (kind, available_at) WHERE state = 'pending' AND written_late;
