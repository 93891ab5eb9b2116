// Build step: tsc does not copy the statement files (src/**/queries/*.sql) next to the JS.
import { cpSync, readdirSync, statSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.sql')) {
      const target = join('dist', path.slice('src/'.length));
      mkdirSync(join(target, '..'), { recursive: true });
      cpSync(path, target);
    }
  }
}
walk('src');
