// The engine's statements, one per file under src/<module>/queries/ (each with a header naming its
// $n parameters, and a `-- @params name: type, ...` line the build reads), compiled into
// statements.generated.ts at build time (scripts/compile-sql.mjs): nothing reads SQL from disk at
// run time. Every statement is reached one way: sql(name, inputs) with its named inputs, checked
// by the compiler against the statement's @params (a missing, misspelt or mistyped input is a
// compile error), returning the pg query config { text, values } in $n order (arrays of strings,
// numbers or booleans as array literals).
import { arrayLiteral, isFlatArray, literalOf } from './pg-text.js';
import { statements, type StatementInputs, type StatementName } from './statements.generated.js';

export type { StatementName, StatementInputs };

/** The named inputs of a statement, as its @params line declares them. */
export type Inputs<N extends StatementName> = StatementInputs[N];

/** A statement with no parameters takes no inputs. */
type InputArgs<N extends StatementName> = [keyof StatementInputs[N]] extends [never] ? [inputs?: StatementInputs[N]] : [inputs: StatementInputs[N]];

/** A statement bound to its inputs: a pg QueryConfig (spread it to add `types` or `name`). */
export interface BoundStatement {
  text: string;
  values: unknown[];
}

/** The statements that declare slots (`-- @slot name marker`), and their slot names. */
export type SlottedName = { [N in StatementName]: keyof (typeof statements)[N]['slots'] extends never ? never : N }[StatementName];
export type SlotName<N extends SlottedName> = keyof (typeof statements)[N]['slots'] & string;

/** The values of a statement's inputs in $n order. Throws when an input is missing or unknown
 *  (the compiler refuses both; this guards callers that bypass it). */
export function statementValues<N extends StatementName>(name: N, ...[inputs]: InputArgs<N>): unknown[] {
  const params: readonly string[] = statements[name].params;
  const given = (inputs ?? {}) as Record<string, unknown>;
  const values = params.map((p) => {
    if (!(p in given)) throw new Error(`${name}: input ${p} is missing (inputs: ${params.join(', ')})`);
    // A shard's arrays (biz_ids, applied, held ids) as one literal: the text they came in when it
    // is known, else written in one pass. pg sends every parameter as text, so the server reads
    // the same thing (pg-text.ts).
    const value = given[p];
    return literalOf(value) ?? (isFlatArray(value) ? arrayLiteral(value) : value);
  });
  if (Object.keys(given).length !== params.length) {
    const unknown = Object.keys(given).filter((k) => !params.includes(k));
    throw new Error(`${name}: unknown input(s) ${unknown.join(', ')} (inputs: ${params.join(', ') || 'none'})`);
  }
  return values;
}

/** A statement with its named inputs, e.g. sql('worker/lock_shard', { shardId, leaseToken }). */
export function sql<N extends StatementName>(name: N, ...inputs: InputArgs<N>): BoundStatement {
  return { text: statements[name].text, values: statementValues(name, ...inputs) };
}

/** The text of a statement file alone (for tests, EXPLAIN, and compositions). */
export function statement(name: StatementName): string {
  return statements[name].text;
}

/**
 * A statement with some of its declared slots filled: each slot given replaces the one line that
 * slot marks in the file (its default), exactly once and as written (no replacement patterns: `$$`,
 * `$&` or `$1` in the text reach the output unchanged). No slot given: the statement as written.
 * Its parameters stay the statement's own: bind them with statementValues(name, inputs).
 */
export function compose<N extends SlottedName>(name: N, fill: { [S in SlotName<N>]?: string }): string {
  const { text, slots } = statements[name];
  const spans = (Object.entries(slots) as [string, readonly [number, number]][])
    .filter(([slot]) => (fill as Record<string, string | undefined>)[slot] !== undefined)
    .sort((a, b) => a[1][0] - b[1][0]);
  let out = '';
  let from = 0;
  for (const [slot, [start, end]] of spans) {
    out += text.slice(from, start) + (fill as Record<string, string>)[slot];
    from = end;
  }
  return out + text.slice(from);
}
