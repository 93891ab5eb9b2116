// Reading PostgreSQL's text form directly: statements that return arrays of a whole shard (ids,
// biz_ids, payloads, lateness) ask pg to leave every column as text, and parse only what they
// use, so nothing per timeout is converted twice.
import pg from 'pg';

/** Query option: leaves every column as PostgreSQL's text. */
export const AS_TEXT = { getTypeParser: () => (value: string) => value };

/** pg's parser for an array type (array OIDs are not among pg's builtin type ids). */
function arrayParser<T>(oid: number): (text: string) => T[] {
  return pg.types.getTypeParser(oid as Parameters<typeof pg.types.getTypeParser>[0]) as (text: string) => T[];
}

const pgInt8Array = arrayParser<string>(1016);
const pgTextArray = arrayParser<string>(1009);
const pgJsonbArray = arrayParser<unknown>(3807);
const pgFloat8Array = arrayParser<number>(1022);

/**
 * The items of a one-dimensional array literal in which PostgreSQL quoted nothing, NULL items as
 * null; undefined when it quoted an item (or the literal is not that simple), for pg's parser.
 * PostgreSQL quotes every item that holds a comma, quote, backslash, brace or white space, the
 * empty string, and a string that reads NULL: with no `"` anywhere, a split on commas is exact.
 * A shard's ids, biz_ids and lateness arrive this way: pg's parser walks them a character at a
 * time (issue 32: 124 ms of a 50,000 burst's node CPU in the external claim's arrays).
 */
function plainItems(text: string): (string | null)[] | undefined {
  if (text.charCodeAt(0) !== 123 /* { */ || text.charCodeAt(1) === 123 || text.includes('"')) return undefined;
  if (text.length === 2) return [];
  const items: (string | null)[] = text.slice(1, -1).split(',');
  for (let i = 0; i < items.length; i += 1) if (items[i] === 'NULL') items[i] = null;
  return items;
}

export function parseInt8Array(text: string): string[] {
  return (plainItems(text) as string[] | undefined) ?? pgInt8Array(text);
}

/** Also remembers the text as the array's literal (literalOf): sent on as it came, unless quoted. */
export function parseTextArray(text: string): string[] {
  const items = plainItems(text) as string[] | undefined;
  return items ? withLiteral(items, text) : pgTextArray(text);
}

/**
 * Arrays whose literal is already known: the text PostgreSQL sent them in (a claim's biz_ids, a
 * handler's applied ids aggregated in the business database). sql() and the SQL handler send that
 * text on instead of writing the array again, item by item: a shard's ids reach the business
 * database, its marker and the record without being written anew each time. Only for arrays
 * nothing changes afterwards; for an array of items, the literal of their biz_ids.
 */
const knownLiterals = new WeakMap<readonly unknown[], string>();

export function withLiteral<T extends readonly unknown[]>(array: T, literal: string): T {
  knownLiterals.set(array, literal);
  return array;
}

export function literalOf(value: unknown): string | undefined {
  return Array.isArray(value) ? knownLiterals.get(value) : undefined;
}

export function parseFloat8Array(text: string): number[] {
  const items = plainItems(text);
  return items ? items.map((v) => (v === null ? (null as unknown as number) : Number(v))) : pgFloat8Array(text);
}

/** jsonb items are quoted unless they are NULL or a bare scalar (a number, true, false, null). */
export function parseJsonbArray(text: string): unknown[] {
  const items = plainItems(text);
  return items ? items.map((v) => (v === null ? null : (JSON.parse(v) as unknown))) : pgJsonbArray(text);
}

/**
 * An array literal of strings, numbers or booleans for a statement parameter (text[], bigint[],
 * boolean[]: PostgreSQL casts it to the parameter's type). pg's own serialization quotes and
 * escapes every item, one string operation after another; here only the items that need it are
 * quoted (see plainItems), so a shard's thousands of plain biz_ids are joined as they are.
 */
export function arrayLiteral(values: readonly (string | number | boolean)[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i += 1) {
    const v = values[i]!;
    if (i > 0) out += ',';
    if (typeof v !== 'string') {
      out += String(v); // as pg writes them: NaN and Infinity too (float8 reads them)
    } else if (PLAIN_ITEM.test(v) && !/^null$/i.test(v)) {
      out += v;
    } else {
      out += `"${v.replace(/[\\"]/g, '\\$&')}"`;
    }
  }
  return `${out}}`;
}

/** An item PostgreSQL reads as written inside an array literal. */
const PLAIN_ITEM = /^[^\s",\\{}]+$/;

/** The items of an int4[] literal ({12,-3,40}): integers need no quoting rules, so a split does
 *  (a shard's lateness, thousands of values). */
function intArrayItems(text: string): string[] {
  return text.length <= 2 ? [] : text.slice(1, -1).split(',');
}

/** Seconds from an int4[] of milliseconds. */
export function parseMillisArray(text: string): number[] {
  return intArrayItems(text).map((v) => Number(v) / 1000);
}

/** Numbers from an int4[] ({3,1,20000}). */
export function parseIntArray(text: string): number[] {
  return intArrayItems(text).map(Number);
}

/** An array arrayLiteral can write: every item a string, a finite-or-not number or a boolean (no
 *  NULL, Date, Buffer or nested array: those go through pg's own serialization). */
export function isFlatArray(value: unknown): value is (string | number | boolean)[] {
  if (!Array.isArray(value)) return false;
  for (const v of value) if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') return false;
  return true;
}
