// The engine's statements, one per file under src/<module>/queries/ (each with a header naming its
// $n parameters), compiled into statements.generated.ts at build time (scripts/compile-sql.mjs):
// nothing reads SQL from disk at run time, and a statement's name is checked by the compiler.
import { statements, type StatementName } from './statements.generated.js';

export type { StatementName };

/** The text of a statement file, e.g. statement('worker/take_lease'). */
export function statement(name: StatementName): string {
  return statements[name];
}
