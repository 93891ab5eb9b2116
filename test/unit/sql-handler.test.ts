// replaceParameter: the batch form of a SQL handler substitutes its $1 textually, so the scanner
// must leave literals, identifiers, comments and dollar-quoted bodies alone.
import { describe, expect, it } from 'vitest';
import { replaceParameter } from '../../src/worker/sql-handler.js';

const R = 'IDS';

describe('replaceParameter', () => {
  it('replaces every $1 in code', () => {
    expect(replaceParameter('UPDATE o SET s = 1 WHERE id = ANY($1) AND x <> ALL($1::int[])', 1, R)).toBe(
      'UPDATE o SET s = 1 WHERE id = ANY(IDS) AND x <> ALL(IDS::int[])',
    );
  });

  it('leaves $10, $11 and other parameters alone', () => {
    expect(replaceParameter('SELECT $1, $10, $11, $2', 1, R)).toBe('SELECT IDS, $10, $11, $2');
  });

  it('skips string literals (with doubled quotes), quoted identifiers and comments', () => {
    const sql = `SELECT '$1', 'it''s $1', "col$1", $1 -- $1 in a comment\n/* $1 */ FROM t`;
    expect(replaceParameter(sql, 1, R)).toBe(`SELECT '$1', 'it''s $1', "col$1", IDS -- $1 in a comment\n/* $1 */ FROM t`);
  });

  it('skips dollar-quoted bodies', () => {
    expect(replaceParameter('SELECT $$ $1 $$, $tag$ $1 $tag$, $1', 1, R)).toBe('SELECT $$ $1 $$, $tag$ $1 $tag$, IDS');
  });

  it('returns undefined when the parameter does not occur outside quotes', () => {
    expect(replaceParameter("SELECT '$1'", 1, R)).toBeUndefined();
    expect(replaceParameter('SELECT 1', 1, R)).toBeUndefined();
  });
});

describe('bindLiterals', () => {
  it('binds every occurrence of each parameter, leaves $10 to the tenth value and quotes, comments alone', async () => {
    const { bindLiterals } = await import('../../src/worker/bind-literals.js');
    const sql = "-- $1 in a comment\nSELECT $1, $2, '$1', $1::int, $3 /* $2 */";
    expect(bindLiterals(sql, [7, "it's", [1, null]])).toBe(`-- $1 in a comment\nSELECT 7, 'it''s', '$1', 7::int, '{"1",NULL}' /* $2 */`);
    // The same text again (the split is cached) with other values, and a parameter with no value.
    expect(bindLiterals(sql, [8, 'b'])).toBe(`-- $1 in a comment\nSELECT 8, 'b', '$1', 8::int, $3 /* $2 */`);
    expect(bindLiterals('SELECT $1, $10', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])).toBe('SELECT 1, 10');
  });
});
