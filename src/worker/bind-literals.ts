// Statement parameters as SQL literals, for multi-statement strings (one round trip for several
// statements), which cannot carry bind parameters. Only for values the worker produces itself:
// numbers, booleans, lease tokens, arrays of ids.
import pg from 'pg';
import { joinParameters, splitAtParameters, type SplitStatement } from './sql-handler.js';

/** SQL literal of a statement parameter: numbers as written, strings quoted, arrays as array
 *  literals, null as NULL (a shard's target on the Citus claim: NULL for a kind without a rule). */
function literal(value: unknown): string {
  if (value === null) return 'NULL';
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`not a finite number: ${String(value)}`);
    return String(value);
  }
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'string') return pg.escapeLiteral(value);
  if (Array.isArray(value)) {
    const items = value.map((v) => (v === null ? 'NULL' : `"${String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`));
    return pg.escapeLiteral(`{${items.join(',')}}`);
  }
  throw new Error(`no literal for ${typeof value}`);
}

/** Each statement text split at its parameters, once: the worker binds the same few files for
 *  every shard, and scanning a commented file per shard cost more CPU than the claim's parsing. */
const splitStatements = new Map<string, SplitStatement>();

/** The statement with $1..$n replaced by literals of values (a parameter with no value is left
 *  as written): bindLiterals(sql('worker/lock_shard', { shardId, leaseToken })), or a text and
 *  its values. */
export function bindLiterals(statement: { text: string; values: unknown[] }): string;
export function bindLiterals(sql: string, values: unknown[]): string;
export function bindLiterals(statement: string | { text: string; values: unknown[] }, values: unknown[] = []): string {
  const sql = typeof statement === 'string' ? statement : statement.text;
  if (typeof statement !== 'string') values = statement.values;
  let split = splitStatements.get(sql);
  if (!split) {
    split = splitAtParameters(sql);
    if (splitStatements.size < 1000) splitStatements.set(sql, split);
  }
  const literals = values.map(literal);
  return joinParameters(split, (n) => literals[n - 1]);
}
