// The pure-SQL limit: claim k due timeouts (SKIP LOCKED), mark them done and close their unpaid
// orders, in one statement per transaction, looped by a few connections (bench/runner.ts; alone in
// bench/statements.ts). Two schemas:
//   - minimal: the leanest schema that does the work, the physical reference: one `timeouts`
//     table (id, biz_id, due_at, state), its primary key and one partial index on due_at WHERE
//     state = 'pending' (MINIMAL_DDL);
//   - ours: the same work on timeout_center.timeouts with its extra columns and indexes (a done
//     timeout moves to timeout_center.done_timeouts, sql/0010), so the difference between the two
//     rows is what our schema costs.
// Two spellings of the claim: `in` (id IN (SELECT ...)), with which the planner may hash-join the
// claimed ids against a scan of the whole table; `array` (id = ANY (ARRAY(SELECT ...))), which makes
// it probe the primary key.
//   $1 k (rows per statement)
export type LimitForm = 'in' | 'array';
export type LimitSchema = 'minimal' | 'ours';

/** The minimal schema (in the system's own database, schema public). */
export const MINIMAL_DDL = `
  CREATE TABLE timeouts (
    id     bigserial PRIMARY KEY,
    biz_id bigint NOT NULL,
    due_at timestamptz NOT NULL,
    state  text NOT NULL DEFAULT 'pending'
  );
  CREATE INDEX timeouts_pending_due ON timeouts (due_at) WHERE state = 'pending'`;

/** Schedules one minimal timeout per order in [$1, $2], due at $3. */
export const MINIMAL_INSERT = `INSERT INTO timeouts (biz_id, due_at) SELECT i, $3 FROM generate_series($1::bigint, $2::bigint) i`;

function claimed(form: LimitForm, claim: string): string {
  return form === 'array' ? `t.id = ANY (ARRAY(${claim}))` : `t.id IN (${claim})`;
}

const CLOSE = `UPDATE orders SET status = 'closed', closed_at = clock_timestamp(), closes = closes + 1`;

export function pureSqlStatement(form: LimitForm, kind: string, schema: LimitSchema = 'ours'): string {
  if (schema === 'minimal') {
    const claim = `SELECT id FROM timeouts WHERE state = 'pending' AND due_at <= now() ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED`;
    return `
WITH due AS (
  UPDATE timeouts t SET state = 'done'
   WHERE ${claimed(form, claim)}
  RETURNING t.biz_id
), closed AS (
  ${CLOSE}
   WHERE id IN (SELECT biz_id FROM due) AND status = 'unpaid'
  RETURNING id
)
SELECT (SELECT count(*) FROM due)::int AS n, (SELECT count(*) FROM closed)::int AS closed`;
  }
  const claim = `SELECT id FROM timeout_center.timeouts
                   WHERE kind = '${kind.replace(/'/g, "''")}' AND state = 'pending' AND available_at <= now()
                   ORDER BY available_at LIMIT $1 FOR UPDATE SKIP LOCKED`;
  // Our schema's done timeout leaves the hot table for done_timeouts (sql/0010), as the worker's
  // claim.sql does it.
  return `
WITH due AS (
  DELETE FROM timeout_center.timeouts t
   WHERE ${claimed(form, claim)}
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at
), moved AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts + 1, 'applied', last_error, created_at, clock_timestamp() FROM due
), closed AS (
  ${CLOSE}
   WHERE id IN (SELECT biz_id::bigint FROM due) AND status = 'unpaid'
  RETURNING id
)
SELECT (SELECT count(*) FROM due)::int AS n, (SELECT count(*) FROM closed)::int AS closed`;
}
