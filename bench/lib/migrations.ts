// The migrations before a given one, in a directory of their own (for migrate(pool, logger, dir)):
// a bench variant measured on the schema as it was before that migration.
import { copyFileSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// dist/: the benches build first.
import { MIGRATIONS_DIR } from '../../dist/db/migrate.js';

const dirs = new Map<number, string>();

/** A directory holding sql/NNNN_*.sql for NNNN < version (made once per process). */
export function migrationsBefore(version: number): string {
  let dir = dirs.get(version);
  if (!dir) {
    dir = mkdtempSync(join(tmpdir(), `tc-before-${version}-`));
    for (const f of readdirSync(MIGRATIONS_DIR)) {
      if (/^\d{4}_[\w-]+\.sql$/.test(f) && Number(f.slice(0, 4)) < version) copyFileSync(join(MIGRATIONS_DIR, f), join(dir, f));
    }
    dirs.set(version, dir);
  }
  return dir;
}
