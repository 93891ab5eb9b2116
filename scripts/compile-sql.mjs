// Build step: compiles every statement file (src/<module>/queries/<name>.sql, one statement each,
// with a header naming its $n parameters and a machine-readable `-- @params` line) into one
// TypeScript module, src/db/statements.generated.ts, keyed '<module>/<name>': each statement's
// text, its parameter names in $n order, its named slots, and its input type. Nothing reads SQL
// from disk at run time, and a statement's name and inputs are checked by the compiler
// (db/queries.ts sql()). The parser is scripts/sql-statements.mjs: a statement whose @params
// disagree with the $n it uses, or whose declared slot is missing, fails the build with the file
// and what is wrong. Run by `npm run build` and `npm run typecheck` before tsc, and by the test
// suite's global setup; the output is not committed (.gitignore).
import { readdirSync, readFileSync, statSync, writeFileSync, existsSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import process from 'node:process';
import { fileURLToPath, URL } from 'node:url';
import { parseStatement, renderModule, StatementError } from './sql-statements.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// Arguments (for the compiler's own test): a source directory and an output file.
const src = process.argv[2] ? resolve(process.argv[2]) : join(root, 'src');
const out = process.argv[3] ? resolve(process.argv[3]) : join(src, 'db', 'statements.generated.ts');

function walk(dir, found = []) {
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, found);
    else if (name.endsWith('.sql') && (dir.endsWith(`${sep}queries`) || dir.endsWith(`${sep}queries${sep}citus`))) found.push(path);
  }
  return found;
}

let parsed;
try {
  parsed = walk(src).map((path) => {
    // src/worker/queries/take_lease.sql -> worker/take_lease; the Citus layout's variant
    // src/worker/queries/citus/claim.sql -> citus/worker/claim (src/db/citus-layout.ts)
    const rel = relative(src, path).split(sep);
    const citus = rel.at(-2) === 'citus';
    const module = rel.slice(0, citus ? -3 : -2).join('/');
    const key = `${citus ? 'citus/' : ''}${module}/${rel.at(-1).replace(/\.sql$/, '')}`;
    return parseStatement(key, readFileSync(path, 'utf8'), relative(root, path));
  });
} catch (err) {
  if (!(err instanceof StatementError)) throw err;
  process.stderr.write(`compile-sql: ${err.message}\n`);
  process.exit(1);
}
const text = renderModule(parsed);
if (!existsSync(out) || readFileSync(out, 'utf8') !== text) writeFileSync(out, text);
