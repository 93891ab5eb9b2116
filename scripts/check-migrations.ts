// npm run check:migrations: the rules of an online migration (test/helpers/migration-rules.ts) on
// every migration in sql/ numbered above 0023, without the test suite's PostgreSQL and Redis.
// Prints each violation (file:line, statement, rule, the safe way) and exits 1 if there is one.
// The suite runs the same check (test/unit/migration-rules.test.ts).
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LAST_BEFORE_1_0, checkMigrations, formatViolation } from '../test/helpers/migration-rules.ts';

const dir = fileURLToPath(new URL('../sql/', import.meta.url));
const files = readdirSync(dir)
  .filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f))
  .sort()
  .map((f) => ({ file: `sql/${f}`, sql: readFileSync(`${dir}${f}`, 'utf8') }));
const violations = await checkMigrations(files);
const judged = files.filter((f) => Number(f.file.slice(4, 8)) > LAST_BEFORE_1_0).length;
for (const v of violations) console.log(`${formatViolation(v)}\n`);
console.log(`${judged} migration(s) after ${String(LAST_BEFORE_1_0).padStart(4, '0')} checked: ${violations.length} violation(s)`);
process.exitCode = violations.length > 0 ? 1 : 0;
