// The shape of src/, kept by the suite: no import cycle between modules, no arrow up into the CLI
// (src/cli/ uses everything; nothing outside it uses src/cli/), and no file in src/coordinator/
// over 250 lines. Imports are read from the source text: static `import ... from`, `export ...
// from` and `import('...')` with a literal path, type-only ones included (a cycle of types is
// still a cycle a reader has to hold in their head).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s*['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g;

/** file (relative to src/) -> the src/ files it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const text = readFileSync(file, 'utf8');
    const targets = new Set<string>();
    for (const m of text.matchAll(IMPORT)) {
      const spec = (m[1] ?? m[2])!;
      if (spec.endsWith('.sql')) continue;
      targets.add(relative(SRC, resolve(dirname(file), spec.replace(/\.js$/, '.ts'))));
    }
    graph.set(relative(SRC, file), [...targets]);
  }
  return graph;
}

/** Every cycle, each as a path that ends where it starts (Tarjan's strongly connected components). */
function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const stack: string[] = [];
  const on = new Set<string>();
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index += 1;
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) {
        low.set(v, Math.min(low.get(v)!, idx.get(w)!));
      }
    }
    if (low.get(v) === idx.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}

describe('the shape of src/', () => {
  const graph = importGraph();

  it('reads the imports it checks', () => {
    expect(graph.size).toBeGreaterThan(50);
    expect(graph.get('worker/executor.ts')).toContain('worker/lease.ts');
  });

  it('has no import cycle', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('has no import from src/cli/ outside src/cli/', () => {
    const upward = [...graph].flatMap(([file, targets]) =>
      file.startsWith('cli/') ? [] : targets.filter((t) => t.startsWith('cli/')).map((t) => `${file} -> ${t}`),
    );
    expect(upward).toEqual([]);
  });

  it('keeps every file of src/coordinator/ under 250 lines', () => {
    const long = [...graph.keys()]
      .filter((f) => f.startsWith('coordinator/'))
      .map((f) => [f, readFileSync(join(SRC, f), 'utf8').split('\n').length] as const)
      .filter(([, lines]) => lines > 250)
      .map(([f, lines]) => `${f}: ${lines} lines`);
    expect(long).toEqual([]);
  });
});
