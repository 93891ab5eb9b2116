// The pure-SQL limit's statement, shared by the bench's limit loop (bench/runner.ts) and the
// statement bench (bench/statements.ts): claim k due timeouts (SKIP LOCKED), mark them done and
// close their unpaid orders, in one statement. Two spellings of the claim: `in` is the one the
// issue writes (id IN (SELECT ...)), with which the planner may hash-join the claimed ids against a
// scan of the whole table; `array` (id = ANY (ARRAY(SELECT ...))) makes it probe the primary key.
//   $1 k (rows per statement)
export type LimitForm = 'in' | 'array';

export function pureSqlStatement(form: LimitForm, kind: string): string {
  const claim = `SELECT id FROM timeout_center.timeouts
                   WHERE kind = '${kind.replace(/'/g, "''")}' AND state = 'pending' AND available_at <= now()
                   ORDER BY available_at LIMIT $1 FOR UPDATE SKIP LOCKED`;
  return `
WITH due AS (
  UPDATE timeout_center.timeouts t
     SET state = 'done', result = 'applied', attempts = t.attempts + 1, finished_at = clock_timestamp()
   WHERE ${form === 'array' ? `t.id = ANY (ARRAY(${claim}))` : `t.id IN (${claim})`}
  RETURNING t.biz_id
), closed AS (
  UPDATE orders SET status = 'closed', closed_at = clock_timestamp(), closes = closes + 1
   WHERE id IN (SELECT biz_id::bigint FROM due) AND status = 'unpaid'
  RETURNING id
)
SELECT (SELECT count(*) FROM due)::int AS n, (SELECT count(*) FROM closed)::int AS closed`;
}
