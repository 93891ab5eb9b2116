-- settle_bind: settle for the Settler (settler.ts): what settle.sql does, and for a kind whose
-- handler runs outside this database the row bound to a one-row shard leased to the settler
-- (outcome 'bound'), which it then runs through the external executor (sql/0023).
--   $1 kind   $2 biz_id   $3 how long to wait for a worker holding the row (ms; 0: NOWAIT)
--   $4 owner (the settler's id, shards.owner)   $5 lease (ms)
-- @params kind: string, bizId: string, waitMs: number, owner: string, leaseMs: number
SELECT outcome, timeout_id, state, due_at, available_at, result, shard_id, detail, scan_id, lease_token
  FROM timeout_center.settle_run($1, $2, $3, $4, $5)
