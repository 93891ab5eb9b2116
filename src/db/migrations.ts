// The numbered migrations in sql/ and what each declares in its leading comments:
//   -- tc:no-transaction      run statement by statement outside a transaction (CREATE INDEX
//                             CONCURRENTLY cannot run in one); every statement must be idempotent
//   -- tc:oldest-code X.Y.Z   the oldest timeout-center version that still runs on the schema once
//                             this migration is applied (a breaking change raises it)
// docs/writing-migrations.md states the rules a migration follows; test/unit/migration-rules.test.ts
// checks them with PostgreSQL's parser.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import semver from 'semver';

/** sql/ sits two levels above both src/db and dist/db. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('../../sql/', import.meta.url));

/** The code before 1.0.0 (no release had a number): what a schema without a contract runs. */
export const PRE_RELEASE_CODE = '0.1.0';

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** false: `-- tc:no-transaction`, its statements run one by one outside a transaction. */
  transactional: boolean;
  /** `-- tc:oldest-code`: the floor this migration sets, when it sets one. */
  oldestCode?: string;
}

export function parseMigration(file: string, sql: string): Migration {
  const oldest = /^--\s*tc:oldest-code\s+(\S+)\s*$/m.exec(sql)?.[1];
  if (oldest !== undefined && semver.valid(oldest) === null) {
    throw new Error(`${file}: "-- tc:oldest-code ${oldest}" is not a version (write X.Y.Z, e.g. -- tc:oldest-code 1.2.0)`);
  }
  return {
    version: Number(file.slice(0, 4)),
    name: file.replace(/\.sql$/, ''),
    sql,
    transactional: !/^--\s*tc:no-transaction\s*$/m.test(sql),
    ...(oldest !== undefined ? { oldestCode: oldest } : {}),
  };
}

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f))
    .sort()
    .map((file) => parseMigration(file, readFileSync(`${dir}/${file}`, 'utf8')));
}

/** The oldest code that runs on a schema with these migrations applied: the highest floor any of
 *  them sets (floors only rise), or the code before 1.0.0. */
export function oldestCodeFor(migrations: readonly Migration[]): string {
  let floor = PRE_RELEASE_CODE;
  for (const m of migrations) if (m.oldestCode !== undefined && semver.gt(m.oldestCode, floor)) floor = m.oldestCode;
  return floor;
}

/**
 * The statements of a `-- tc:no-transaction` file, in order: split on a `;` that ends a line
 * (such a file holds no function bodies or DO blocks), comment-only pieces dropped.
 */
export function splitStatements(sql: string): string[] {
  return sql
    .split(/;[ \t]*(?:--[^\n]*)?(?:\r?\n|$)/)
    .map((s) => s.trim())
    .filter((s) => s.split('\n').some((line) => line.trim() !== '' && !line.trim().startsWith('--')));
}

/** `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON [schema.]table`: the index a crash
 *  may have left INVALID, to drop and build again. */
export function concurrentIndex(statement: string): { schema: string; name: string } | undefined {
  const m = /create\s+(?:unique\s+)?index\s+concurrently\s+if\s+not\s+exists\s+"?(\w+)"?\s+on\s+(?:only\s+)?(?:"?(\w+)"?\.)?"?\w+"?/i.exec(
    statement.replace(/^\s*--[^\n]*\n/gm, ''),
  );
  if (!m) return undefined;
  return { name: m[1]!, schema: m[2] ?? 'public' };
}

/** Statements that never block the hot path while they wait (they take SHARE UPDATE EXCLUSIVE
 *  and then wait for older transactions): they get no lock_timeout. */
export function waitsHarmlessly(statement: string): boolean {
  return /^\s*(?:--[^\n]*\n\s*)*(create\s+(unique\s+)?index\s+concurrently|drop\s+index\s+concurrently|reindex\s+.*concurrently|alter\s+table\s+.*\s+validate\s+constraint)/is.test(
    statement,
  );
}
