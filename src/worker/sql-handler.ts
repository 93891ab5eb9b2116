// The batch form of a SQL handler: the kind's statement placed in claim.sql's handler slot, its $1 replaced by
// the business ids the claim took, so that claiming a shard, applying it and finding what it
// skipped is one statement per shard, with no value per timeout crossing into JavaScript. Built
// once per kind at start and checked by PostgreSQL; a handler it cannot take (payloads in $2, a
// statement that cannot stand in a WITH clause, a $1 that is not an array) runs as written.
// On the Citus layout a handler whose $2 is a smallint takes the shard's bucket there: when its
// tables are distributed on the bucket and colocated with timeouts, the batch form is one call of
// a distributed function that Citus runs on the worker node of the bucket (claim_colocated.sql).
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { isConnectionError } from '../db/pool.js';
import { compose, sql, statement } from '../db/queries.js';
import { layoutOf, PLAIN, type Layout } from '../db/citus-layout.js';

/** Newest due first, among the rows due by the flood's instant (the shard's not_before), from the
 *  shard's ceiling when the coordinator has set one (the newest key still pending when it last
 *  looked: sql/0041), past the flood's newest rows already claimed: the claimOrder slot of the
 *  external claims and of the Citus layout's claim (claim.sql reads the same through
 *  claim_fresh_newest: CLAIM_NEWEST_FIRST). */
export const NEWEST_FIRST =
  '     AND (d.available_at, d.id) <= ((SELECT coalesce(s.claim_ceiling, s.not_before) FROM timeout_center.shards s WHERE s.id = $1),\n' +
  '                                    (SELECT coalesce(s.claim_ceiling_id, 9223372036854775807) FROM timeout_center.shards s WHERE s.id = $1))\n' +
  '   ORDER BY d.available_at DESC';

/** claim.sql's read of fresh rows for every other shard of a flood mapped ahead: the same, newest
 *  first from the shard's ceiling (sql/0052 claim_fresh_newest, the read NEWEST_FIRST describes,
 *  planned by itself). */
export const CLAIM_NEWEST_FIRST = '  SELECT f.id, f.biz_id, f.payload, f.due_at, f.trace_parent FROM timeout_center.claim_fresh_newest($1, $2, $3) f';

/**
 * claim.sql composed from its two declared slots (`-- @slot` in the file; the build fails if
 * either marker is missing): `handler`, the line of the `applied` CTE that the batch form's SQL
 * handler replaces (given as the whole line, as written), and `claimOrder`, the line ordering a
 * first run's claim: 'oldest' (the file's line) or 'newest' (a flood's every other shard: the
 * newest rows due by the flood's instant first; the Citus layout's claim reads inline). No slot
 * given: the plain statement, as written.
 */
export function composeClaim(slots: { handler?: string; claimOrder?: 'oldest' | 'newest' }, layout: Layout = PLAIN): string {
  return compose(layout.name === 'citus' ? 'citus/worker/claim' : 'worker/claim', {
    handler: slots.handler,
    claimOrder: slots.claimOrder === 'newest' ? (layout.name === 'citus' ? NEWEST_FIRST : CLAIM_NEWEST_FIRST) : undefined,
  });
}

/** A form of the batch statement: its text and its prepared-statement name. */
export interface BatchStatement {
  sql: string;
  /** Derived from the text (a connection plans it once). */
  name: string;
}

/** claim.sql with the handler inside (sql: $1 shard id, $2 kind, $3 claim limit, $4 true). */
export interface BatchSqlHandler extends BatchStatement {
  /** The same, claiming the newest rows due by the flood's instant first: for every other shard
   *  of a flood mapped ahead (take_lease.sql from_newest), so that two shards running side by
   *  side do not pass over each other's locked rows. */
  newest: BatchStatement;
  timeLimitMs: number;
  /** Citus, the handler's tables colocated with timeouts: the statement is claim_colocated.sql
   *  (`newest` the same: Citus claims oldest first), and this is its handler argument: the kind's
   *  statement with $1 cast to its inferred type and $2 the bucket. */
  colocated?: { handler: string };
}

function batchStatement(sql: string): BatchStatement {
  return { sql, name: `tc_claim_${createHash('sha1').update(sql).digest('hex').slice(0, 20)}` };
}

/**
 * Where the quoted part starting at i ends (a string literal, a quoted identifier, a comment or a
 * dollar-quoted body), or i when none starts there.
 */
function quotedEnd(sql: string, i: number): number {
  const c = sql[i]!;
  if (c === "'" || c === '"') {
    // '' and "" escape the quote inside; a backslash never ends the literal in standard strings.
    let j = i + 1;
    while (j < sql.length && !(sql[j] === c && sql[j + 1] !== c)) j += sql[j] === c ? 2 : 1;
    return j + 1;
  }
  if (c === '-' && sql[i + 1] === '-') {
    const end = sql.indexOf('\n', i);
    return end < 0 ? sql.length : end;
  }
  if (c === '/' && sql[i + 1] === '*') {
    const end = sql.indexOf('*/', i + 2);
    return end < 0 ? sql.length : end + 2;
  }
  if (c === '$') {
    const tag = /\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$/y;
    tag.lastIndex = i;
    const quote = tag.exec(sql);
    if (quote) {
      const end = sql.indexOf(quote[0], i + quote[0].length);
      return end < 0 ? sql.length : end + quote[0].length;
    }
  }
  return i;
}

/** One pass over a statement's code, skipping what quotedEnd skips: `onCode(i)` at each code
 *  position, returning how many characters it consumed (at least one is). */
function scanCode(sql: string, onCode: (i: number) => number): void {
  let i = 0;
  while (i < sql.length) {
    const end = quotedEnd(sql, i);
    i = end > i ? end : i + Math.max(1, onCode(i));
  }
}

/**
 * Where each positional parameter ($1, $2, ...) occurs outside string literals, quoted
 * identifiers, comments and dollar-quoted bodies, in text order: one pass over the statement.
 */
export function parameterPositions(sql: string): { start: number; end: number; n: number }[] {
  const found: { start: number; end: number; n: number }[] = [];
  const number = /\$([0-9]+)/y;
  scanCode(sql, (i) => {
    if (sql[i] !== '$') return 1;
    number.lastIndex = i;
    const param = number.exec(sql);
    if (!param) return 1;
    found.push({ start: i, end: i + param[0].length, n: Number(param[1]) });
    return param[0].length;
  });
  return found;
}

/** Where `;` ends a statement in the text: outside string literals, quoted identifiers, comments
 *  and dollar-quoted bodies. */
export function statementEnds(sql: string): number[] {
  const found: number[] = [];
  scanCode(sql, (i) => {
    if (sql[i] === ';') found.push(i);
    return 1;
  });
  return found;
}

/** A statement cut at its parameters: parts[i] is the text before the ith parameter (numbered
 *  params[i]), and the last part the text after the last one. */
export interface SplitStatement {
  parts: string[];
  params: number[];
}

export function splitAtParameters(sql: string): SplitStatement {
  const split: SplitStatement = { parts: [], params: [] };
  let from = 0;
  for (const p of parameterPositions(sql)) {
    split.parts.push(sql.slice(from, p.start));
    split.params.push(p.n);
    from = p.end;
  }
  split.parts.push(sql.slice(from));
  return split;
}

/** The statement with each parameter $n replaced by valueOf(n); undefined leaves $n as written. */
export function joinParameters(split: SplitStatement, valueOf: (n: number) => string | undefined): string {
  let out = split.parts[0]!;
  split.params.forEach((n, i) => {
    out += (valueOf(n) ?? `$${n}`) + split.parts[i + 1]!;
  });
  return out;
}

/** Replaces the positional parameter $n (as parameterPositions finds it) with replacement.
 *  Returns undefined when $n does not occur. */
export function replaceParameter(sql: string, n: number, replacement: string): string | undefined {
  const split = splitAtParameters(sql);
  if (!split.params.includes(n)) return undefined;
  return joinParameters(split, (m) => (m === n ? replacement : undefined));
}

/** Prepares a statement to learn the parameter types PostgreSQL infers for it (ids = ANY($1)
 *  makes $1 bigint[]); throws PostgreSQL's error when it rejects the statement. */
export async function sqlParameterTypes(pool: pg.Pool, text: string): Promise<string[]> {
  const client = await pool.connect();
  try {
    // The handler's own statement (from the config), prepared as written to be checked.
    await client.query(`PREPARE tc_check_sql AS ${text}`);
    try {
      const { rows } = await client.query<{ types: string[] }>(sql('worker/prepared_types'));
      return rows[0]?.types ?? [];
    } finally {
      await client.query('DEALLOCATE tc_check_sql');
    }
  } finally {
    client.release();
  }
}

/** Which form a SQL handler runs in, and why: logged per kind at start. */
export type SqlHandlerForm = { form: 'batch'; batch: BatchSqlHandler; reason: string } | { form: 'plain'; reason: string };

/** The batch form of the handler, or the plain form with the reason it cannot be batched.
 *  parameterTypes: what sqlParameterTypes returned for the handler, when the caller already asked.
 *  Connection errors are thrown (the worker cannot start), not taken for a reason to run plain. */
export async function sqlHandlerForm(pool: pg.Pool, handlerSql: string, timeLimitMs: number, parameterTypes?: string[]): Promise<SqlHandlerForm> {
  const body = handlerSql.trim().replace(/;\s*$/, '');
  const layout = await layoutOf(pool);
  if (layout.name === 'citus' && /\$2\b/.test(handlerSql) && !/\$(?:[3-9]|\d{2,})/.test(handlerSql)) {
    const types = parameterTypes ?? (await sqlParameterTypes(pool, body));
    if (takesBucket(layout, types)) return colocatedForm(pool, layout, body, types[0], timeLimitMs);
  }
  if (/\$(?:[2-9]|\d{2,})/.test(handlerSql)) return { form: 'plain', reason: 'it takes payloads ($2) or more parameters' };
  const types = parameterTypes ?? (await sqlParameterTypes(pool, body));
  const type = types.length === 1 ? types[0] : undefined;
  if (!type || !/^[a-z0-9_ ]+\[\]$/.test(type)) {
    return { form: 'plain', reason: `its $1 is not an array (PostgreSQL infers ${type ?? 'no single parameter'})` };
  }
  const inner = replaceParameter(body, 1, `(ARRAY(SELECT due.biz_id FROM due)::${type})`);
  if (!inner) return { form: 'plain', reason: '$1 occurs only inside quotes or comments' };
  // compose() splices by position: `$$`, `$&` and `$1` in the handler (a dollar-quoted literal,
  // say) reach PostgreSQL as written.
  const sql = composeClaim({ handler: `  ${inner}` }, layout);
  const newest = composeClaim({ handler: `  ${inner}`, claimOrder: 'newest' }, layout);
  try {
    await sqlParameterTypes(pool, sql); // PostgreSQL accepts the combined statement
    // Citus plans a distributed statement at execution, not at PREPARE: EXPLAIN it (nothing runs)
    // with a shard's values, so a statement Citus refuses (a VOLATILE function in an UPDATE of a
    // query on distributed tables, say) runs in the plain form from the start instead of failing
    // every shard.
    if (layout.name === 'citus') await pool.query({ text: `EXPLAIN ${sql}`, values: [0, null, 0, true, layout.buckets[0]] });
  } catch (err) {
    if (isConnectionError(err)) throw err;
    return { form: 'plain', reason: `it cannot stand inside the claim statement: ${(err as Error).message}` };
  }
  return {
    form: 'batch',
    batch: { ...batchStatement(sql), newest: batchStatement(newest), timeLimitMs },
    reason: 'it takes only an array $1 and returns the ids it changed',
  };
}

/** On the Citus layout, a handler whose parameters are an array $1 and a smallint $2 takes the
 *  shard's bucket as $2 (its tables distributed on the bucket, colocated with timeouts). */
export function takesBucket(layout: Layout, types: readonly string[]): boolean {
  return layout.name === 'citus' && types.length === 2 && /^[a-z0-9_ ]+\[\]$/.test(types[0] ?? '') && types[1] === 'smallint';
}

/**
 * The colocated batch form (Citus): claim_colocated.sql, one call of timeout_center.claim_in_bucket
 * per shard, delegated by Citus to the worker node of the shard's bucket. Checked at start with a
 * call that claims nothing (limit 0) in a transaction rolled back: the handler runs there on an
 * empty batch, and Citus refuses it unless every table it touches is on the bucket's shards
 * (force delegation). A handler that fails the check runs in the plain form, its $2 the bucket.
 */
async function colocatedForm(pool: pg.Pool, layout: Layout, body: string, arrayType: string | undefined, timeLimitMs: number): Promise<SqlHandlerForm> {
  const handler = replaceParameter(body, 1, `($1::${arrayType})`);
  if (!handler || layout.name !== 'citus') return { form: 'plain', reason: '$1 occurs only inside quotes or comments' };
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    try {
      await client.query(sql('citus/worker/claim_colocated', { bucket: layout.buckets[0]!, shardId: 0, kind: null, claimLimit: 0, handler, lockTimeoutMs: 0 }));
    } finally {
      await client.query('ROLLBACK');
    }
  } catch (err) {
    if (isConnectionError(err)) throw err;
    return {
      form: 'plain',
      reason: `it takes the bucket ($2), but its tables are not all distributed on it and colocated with timeouts, so the claim cannot run on the bucket's node: ${(err as Error).message}`,
    };
  } finally {
    client.release();
  }
  const text = statement('citus/worker/claim_colocated');
  return {
    form: 'batch',
    batch: { ...batchStatement(text), newest: batchStatement(text), timeLimitMs, colocated: { handler } },
    reason: "it takes an array $1 and the bucket $2, its tables colocated with timeouts: claim, handler and move run in one call on the bucket's worker node",
  };
}

/** The batch form of the handler, or undefined when it must run as written (see sqlHandlerForm). */
export async function batchSqlHandler(pool: pg.Pool, handlerSql: string, timeLimitMs: number, parameterTypes?: string[]): Promise<BatchSqlHandler | undefined> {
  const form = await sqlHandlerForm(pool, handlerSql, timeLimitMs, parameterTypes);
  return form.form === 'batch' ? form.batch : undefined;
}
