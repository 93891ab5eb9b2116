// The template timeout_center.settle (sql/0021) runs a kind's SQL handler from: the statement the
// claim composes for the batch form (worker/sql-handler.ts puts the handler in claim.sql's
// `applied (v)` CTE), here inside `WITH applied (v) AS (...)` counting whether the one biz_id came
// back. Its $1 and $2 become format() arguments (%1$s: the ids, %2$s: the payloads as JSON text,
// each an array literal that PostgreSQL types as the handler's $n, as it types the worker's
// untyped parameters; %3$s: the biz_id), every other % doubled. Written into
// timeout_center.kinds.settle_statement by syncKinds (db/kinds.ts) for the kinds whose handler runs
// in the database that holds their timeouts.
import type { KindConfig } from '../config.js';
import { splitAtParameters } from '../worker/sql-handler.js';

/** The settle template of a SQL handler, or undefined for one settle cannot run (a parameter
 *  other than $1 and $2, or no $1: the worker would refuse it too). */
export function settleTemplate(handlerSql: string): string | undefined {
  const body = handlerSql.trim().replace(/;\s*$/, '');
  const split = splitAtParameters(body);
  if (!split.params.includes(1) || split.params.some((n) => n !== 1 && n !== 2)) return undefined;
  const escape = (text: string) => text.replaceAll('%', '%%');
  let handler = escape(split.parts[0]!);
  split.params.forEach((n, i) => {
    handler += `%${n}$s${escape(split.parts[i + 1]!)}`;
  });
  return `WITH applied (v) AS (\n${handler}\n)\nSELECT count(*)::int FROM applied a WHERE a.v::text = %3$s`;
}

/** The settle template of a kind, when its handler runs in the database that holds its
 *  timeouts: a SQL handler without a database or route (the center), or a kind stored beside
 *  its orders (its store, where the handler runs as on the same-database path). Else undefined:
 *  timeout_center.settle answers 'unsupported'. */
export function kindSettleTemplate(kind: KindConfig): string | undefined {
  const handler = kind.handler;
  if (handler.type !== 'sql') return undefined;
  const local = (!handler.database && !handler.route) || kind.store === 'beside';
  return local ? settleTemplate(handler.sql) : undefined;
}
