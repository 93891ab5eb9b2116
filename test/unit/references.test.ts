// Stale words: every statement file (`name.sql`) named in the code, the SQL and the docs exists.
// (pin.sql and docs/architecture.md named a mark_done.sql that had been gone since 0003.)
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function files(dir: string, test: (name: string) => boolean): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return files(path, test);
    return test(name) ? [path] : [];
  });
}

describe('references to statement files', () => {
  it('every `*.sql` named in src/, docs/ and README.md exists', () => {
    const existing = new Set([...files('src', (n) => n.endsWith('.sql')), ...files('sql', (n) => n.endsWith('.sql'))].map((p) => basename(p)));
    const sources = [...files('src', (n) => /\.(ts|sql)$/.test(n)), ...files('docs', (n) => n.endsWith('.md')), 'README.md'];
    const missing: string[] = [];
    for (const path of sources) {
      const raw = readFileSync(join(ROOT, path), 'utf8');
      // In TypeScript, the comments (code says handler.sql for a property), and query(here, 'name').
      const text = path.endsWith('.ts')
        ? [
            ...raw.split('\n').flatMap((l) => (/^\s*(\/\/|\*|\/\*\*?)/.test(l) ? [l] : l.includes('// ') ? [l.slice(l.indexOf('// '))] : [])),
            ...[...raw.matchAll(/query\(here, '([a-z0-9_]+)'\)/g)].map((m) => `${m[1]}.sql`),
          ].join('\n')
        : raw;
      for (const m of text.matchAll(/\b([a-z0-9_]+)\.sql\b/g)) {
        // a config field's path (`kinds.<name>.handler.sql`, docs/reference/config.md) is not a file
        if (text[m.index - 1] === '.') continue;
        if (!existing.has(`${m[1]}.sql`)) missing.push(`${path}: ${m[0]}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
