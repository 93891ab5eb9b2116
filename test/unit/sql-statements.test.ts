// The statement compiler (scripts/sql-statements.mjs, run by scripts/compile-sql.mjs at build
// time) refuses a statement file whose @params disagree with the $n it uses, or whose declared slot
// is missing, naming the file and what is wrong; and the build itself fails on such a file.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain JavaScript build script, without type declarations
import { parseStatement, usedParameters } from '../../scripts/sql-statements.mjs';

const compiler = fileURLToPath(new URL('../../scripts/compile-sql.mjs', import.meta.url));

interface Parsed {
  text: string;
  params: { name: string; type: string }[];
  slots: { name: string; start: number; end: number }[];
}
const parse = (source: string): Parsed => parseStatement('m/s', source, 'src/m/queries/s.sql') as Parsed;

describe('statement compiler', () => {
  it('reads @params in $n order (over several lines) and leaves the annotation lines out of the text', () => {
    const p = parse('-- s: a statement\n--   $1 id   $2 names\n-- @params id: number,\n-- @params names: Record<string, number>[]\nSELECT $1, $2\n');
    expect(p.params).toEqual([
      { name: 'id', type: 'number' },
      { name: 'names', type: 'Record<string, number>[]' },
    ]);
    expect(p.text).toBe('-- s: a statement\n--   $1 id   $2 names\nSELECT $1, $2\n');
  });

  it('counts only parameters outside comments, literals, quoted identifiers and dollar-quoted bodies', () => {
    expect([...(usedParameters(`SELECT $2 -- $9\n, '$8', "$7", $$ $6 $$, $t$ $5 $t$ /* $4 */, a$3, $1`) as Set<number>)].sort()).toEqual([1, 2]);
  });

  it('refuses a statement using more parameters than it declares', () => {
    expect(() => parse('-- @params id: number\nSELECT $1, $2')).toThrow(
      "src/m/queries/s.sql: @params declares 1 parameter(s) (id) but the statement's highest parameter is $2",
    );
  });

  it('refuses a statement declaring more parameters than it uses', () => {
    expect(() => parse('-- @params id: number, kind: string\nSELECT $1 -- $2 in a comment does not count')).toThrow(
      /src\/m\/queries\/s\.sql: @params declares 2 parameter\(s\) \(id, kind\) but the statement's highest parameter is \$1/,
    );
    expect(() => parse("-- @params id: number\nSELECT '$1'")).toThrow(/highest parameter is \$0/);
  });

  it('refuses a statement with parameters but no @params line, and a gap in the $n used', () => {
    expect(() => parse('--   $1 id\nSELECT $1')).toThrow('src/m/queries/s.sql: uses $1..$1 but has no "-- @params name: type, ..." line naming them');
    expect(() => parse('-- @params a: number, b: number\nSELECT $2')).toThrow(/\$1 \(a\) is declared but the statement never uses it/);
  });

  it('refuses malformed @params and unknown annotations', () => {
    expect(() => parse('-- @params id\nSELECT $1')).toThrow(/"id" is not "name: type"/);
    expect(() => parse('-- @params id: number, id: number\nSELECT $1, $2')).toThrow(/id is declared twice/);
    expect(() => parse('-- @param id: number\nSELECT $1')).toThrow(/unknown annotation @param/);
  });

  it('finds a declared slot on exactly one line, and refuses a missing or doubled one', () => {
    const p = parse('-- @slot order tc:order\nSELECT 1\n ORDER BY a -- tc:order (the default)\n');
    expect(p.slots).toHaveLength(1);
    expect(p.text.slice(p.slots[0]!.start, p.slots[0]!.end)).toBe(' ORDER BY a -- tc:order (the default)');
    expect(() => parse('-- @slot order tc:order\nSELECT 1 -- tc:orders\n')).toThrow(
      'src/m/queries/s.sql: @slot order: expected exactly one line marked "-- tc:order", found none',
    );
    expect(() => parse('-- @slot order tc:order\nSELECT 1 -- tc:order\n, 2 -- tc:order\n')).toThrow(/found 2/);
  });

  it('the build fails on such a file, naming it, and writes nothing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tc-compile-sql-'));
    try {
      mkdirSync(join(dir, 'm', 'queries'), { recursive: true });
      writeFileSync(join(dir, 'm', 'queries', 'good.sql'), '-- @params id: number\nSELECT $1\n');
      writeFileSync(join(dir, 'm', 'queries', 'bad.sql'), '-- bad: declares one, uses two\n-- @params id: number\nSELECT $1, $2\n');
      const out = join(dir, 'out.ts');
      let failure: { status: number; stderr: string } | undefined;
      try {
        execFileSync(process.execPath, [compiler, dir, out], { stdio: 'pipe', encoding: 'utf8' });
      } catch (err) {
        failure = err as { status: number; stderr: string };
      }
      expect(failure?.status).toBe(1);
      expect(failure?.stderr).toContain("bad.sql: @params declares 1 parameter(s) (id) but the statement's highest parameter is $2");
      expect(existsSync(out)).toBe(false);
      // Fixed, it compiles.
      writeFileSync(join(dir, 'm', 'queries', 'bad.sql'), '-- @params id: number, kind: string\nSELECT $1, $2\n');
      execFileSync(process.execPath, [compiler, dir, out], { stdio: 'pipe' });
      expect(readFileSync(out, 'utf8')).toContain('"m/bad": { id: number; kind: string };');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
