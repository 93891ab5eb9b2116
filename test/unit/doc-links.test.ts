// Every relative link and #anchor in README.md and docs/ resolves: the file (or folder) exists, and an
// anchor names a heading of the page it points to, by GitHub's rules for heading ids (github-slugger:
// lower case, punctuation dropped, each space a hyphen, a repeated heading gets -1, -2, ...).
// A page that moved or a heading that was renamed fails here, not in a reader's browser.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function markdownFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return markdownFiles(path);
    return name.endsWith('.md') ? [path] : [];
  });
}

/** The page's lines outside fenced code blocks (``` or ~~~), with inline code spans blanked. */
function proseLines(text: string): string[] {
  const out: string[] = [];
  let fence: string | null = null;
  for (const line of text.split('\n')) {
    const m = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
    if (m) {
      if (fence === null) fence = m[1]![0]!.repeat(m[1]!.length);
      else if (m[1]!.startsWith(fence)) fence = null;
      out.push('');
      continue;
    }
    out.push(fence === null ? line : '');
  }
  return out;
}

/** GitHub's id for a heading's text (github-slugger on the rendered text). */
export function slug(heading: string): string {
  const rendered = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/<[^>]+>/g, '') // inline HTML
    .replace(/[`*]/g, ''); // code and emphasis markers
  return rendered
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a page offers: its headings' ids (numbered as GitHub numbers repeats) and explicit ids. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of proseLines(text)) {
    const h = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      const base = slug(h[1]!);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      out.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const m of line.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) out.add(m[1]!);
  }
  return out;
}

/** Relative link targets of a page: inline links and images, and reference definitions. */
function links(text: string): { target: string; line: number }[] {
  const out: { target: string; line: number }[] = [];
  proseLines(text).forEach((raw, i) => {
    const line = raw.replace(/`[^`]*`/g, '');
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ target: m[1]!, line: i + 1 });
    const ref = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/.exec(line);
    if (ref) out.push({ target: ref[1]!, line: i + 1 });
  });
  return out.filter((l) => !/^[a-z][a-z0-9+.-]*:/i.test(l.target));
}

const PAGES = ['README.md', ...markdownFiles('docs')];

describe('links in README.md and docs/', () => {
  it('slugs as GitHub makes them', () => {
    expect(slug('5d. PostgreSQL fails over to a standby — `test/faults/pg-failover.test.ts`')).toBe(
      '5d-postgresql-fails-over-to-a-standby--testfaultspg-failovertestts',
    );
    expect(slug('Burst 200,000 vs the minimal limit (target ≥ 0.9×): met')).toBe('burst-200000-vs-the-minimal-limit-target--09-met');
    expect(slug('scans, shards, failed')).toBe('scans-shards-failed');
    expect(slug('The `timeout_center.backlog` view')).toBe('the-timeout_centerbacklog-view');
  });

  it('every relative link and #anchor resolves', () => {
    const broken: string[] = [];
    const cache = new Map<string, Set<string>>();
    const anchorsOf = (path: string) => {
      let a = cache.get(path);
      if (!a) cache.set(path, (a = anchors(readFileSync(path, 'utf8'))));
      return a;
    };
    for (const page of PAGES) {
      const abs = join(ROOT, page);
      for (const { target, line } of links(readFileSync(abs, 'utf8'))) {
        const hash = target.indexOf('#');
        const pathPart = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
        const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
        const dest = pathPart === '' ? abs : resolve(dirname(abs), pathPart);
        const where = `${page}:${line}: ${target}`;
        if (!dest.startsWith(ROOT) || !existsSync(dest)) {
          broken.push(`${where} (no ${relative(ROOT, dest)})`);
          continue;
        }
        if (anchor !== null && anchor !== '' && dest.endsWith('.md') && !anchorsOf(dest).has(anchor))
          broken.push(`${where} (no heading #${anchor} in ${relative(ROOT, dest)})`);
      }
    }
    expect(broken).toEqual([]);
  });
});
