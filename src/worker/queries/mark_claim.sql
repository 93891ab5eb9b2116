-- mark_claim: committed just before a same-database shard transaction claims its rows (executor.ts,
-- in the same round trip as the transaction's BEGIN, with synchronous_commit off): this run got as
-- far as its claim. A re-run treats its rows as suspects of killing workers (pin.sql, then
-- split_pinned.sql) only when an earlier run did (take_lease.sql's suspect; sql/0018). Keyed by
-- lease token, so a run whose lease was taken over marks nothing.
--   $1 shard id   $2 lease token
-- @params shardId: number, leaseToken: string
UPDATE timeout_center.shards SET claim_attempt = attempts
 WHERE id = $1 AND lease_token = $2 AND state = 'running'
