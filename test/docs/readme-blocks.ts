// The README's code blocks, read from README.md itself so the tests run what the documentation
// says, not a copy that can drift. A block may carry a name: an HTML comment on the line before
// its fence, `<!-- readme-test: NAME -->` (invisible on GitHub).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const README = fileURLToPath(new URL('../../README.md', import.meta.url));

export interface ReadmeBlock {
  lang: string;
  text: string;
  /** The readme-test marker's name, if any. */
  name: string | undefined;
  /** The `## ` heading the block sits under. */
  section: string;
  /** 1-based line of the opening fence. */
  line: number;
}

export function readmeBlocks(path = README): ReadmeBlock[] {
  const lines = readFileSync(path, 'utf8').split('\n');
  const blocks: ReadmeBlock[] = [];
  let section = '';
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i]!;
    if (line.startsWith('## ')) section = line.slice(3).trim();
    const fence = /^```(\w*)\s*$/.exec(line);
    if (!fence) continue;
    const end = lines.indexOf('```', i + 1);
    if (end < 0) throw new Error(`README.md:${i + 1}: unclosed code block`);
    const marker = /^<!-- readme-test: ([\w.-]+) -->$/.exec(lines[i - 1] ?? '');
    blocks.push({ lang: fence[1] ?? '', text: lines.slice(i + 1, end).join('\n'), name: marker?.[1], section, line: i + 1 });
    i = end;
  }
  return blocks;
}

export function namedBlock(name: string, blocks = readmeBlocks()): ReadmeBlock {
  const found = blocks.filter((b) => b.name === name);
  if (found.length !== 1) throw new Error(`README.md: expected one block marked <!-- readme-test: ${name} -->, found ${found.length}`);
  return found[0]!;
}

/** The README's examples are about order 42. To run an example for another order, its text is
 *  used with every standalone 42 (the id, and the biz_id '42') replaced by that order's id;
 *  nothing else in the text changes. */
export function forOrder(text: string, id: number): string {
  return text.replace(/\b42\b/g, () => String(id));
}

/** The statements of a SQL block in order, each exactly as written (split at the `;` that ends a
 *  line; the README's blocks keep one statement per line group), comments dropped. */
export function statements(text: string): string[] {
  return text
    .split(/;\s*$/m)
    .map((s) => s.split('\n').filter((l) => !/^\s*--/.test(l)).join('\n').trim())
    .filter(Boolean);
}
