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

export const parseInt8Array = arrayParser<string>(1016);
export const parseTextArray = arrayParser<string>(1009);
export const parseJsonbArray = arrayParser<unknown>(3807);
export const parseFloat8Array = arrayParser<number>(1022);

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
