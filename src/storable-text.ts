// What PostgreSQL can store of the strings a caller gives: JSON and JavaScript strings may hold NUL
// (U+0000) and lone UTF-16 surrogates (U+D800-DFFF without their pair); PostgreSQL text refuses NUL
// (and the pg client turns a lone surrogate into U+FFFD silently), jsonb refuses both ("\u0000
// cannot be converted to text", "Unicode low surrogate must follow a high surrogate"). The HTTP
// API's schemas (src/api/schemas.ts) and the business API (schedule.ts) refuse them here, before
// any statement, so that a caller's mistake is bad input naming the field, not a database error.
// A payload is also bounded in depth: a deeply nested one overflows JSON.stringify's stack, and
// PostgreSQL's (max_stack_depth) a little deeper.

/** A string PostgreSQL can store: no NUL, every surrogate in a pair. Written so that it means the
 *  same with and without the regex `u` flag (the OpenAPI document carries it as a JSON Schema
 *  pattern, which validators run in either mode). */
// eslint-disable-next-line no-control-regex -- NUL is what this pattern is about
export const STORABLE_TEXT = /^(?:[^\u0000\ud800-\udfff]|[\ud800-\udbff][\udc00-\udfff])*$/;

/** Most strings hold none of the suspects: one scan answers for them. */
// eslint-disable-next-line no-control-regex -- NUL is what this pattern is about
const SUSPECT = /[\u0000\ud800-\udfff]/;

export const NOT_STORABLE = 'holds a character PostgreSQL cannot store: NUL (\\u0000) or a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)';

/** How deep a payload may nest (objects and arrays): JSON.stringify and PostgreSQL's jsonb parser
 *  recurse per level, and fail some thousands of levels down. */
export const MAX_PAYLOAD_DEPTH = 64;

const TOO_DEEP = `is nested deeper than ${MAX_PAYLOAD_DEPTH} levels (objects and arrays)`;

export function isStorable(s: string): boolean {
  return !SUSPECT.test(s) || STORABLE_TEXT.test(s);
}

/** A string's length in characters (Unicode code points), as PostgreSQL's length() and zod count. */
export function codePointLength(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i += 1) {
    if ((s.charCodeAt(i) & 0xfc00) === 0xd800 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n -= 1;
      i += 1;
    }
  }
  return n;
}

/** Whether PostgreSQL's jsonb can store a payload: payloadProblem(value) === null, without the
 *  bookkeeping of a path (the common case, on every timeout of a batch). */
export function isStorablePayload(value: unknown, depth = 0): boolean {
  if (typeof value === 'string') return isStorable(value);
  if (typeof value !== 'object' || value === null) return true;
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return isStorablePayload((value as { toJSON(): unknown }).toJSON(), depth);
  if (depth >= MAX_PAYLOAD_DEPTH) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i += 1) if (!isStorablePayload(value[i], depth + 1)) return false;
    return true;
  }
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    if (!isStorable(key) || !isStorablePayload((value as Record<string, unknown>)[key], depth + 1)) return false;
  }
  return true;
}

export interface PayloadProblem {
  /** Where in the payload (keys and indexes); a bad key is reported at the object that holds it. */
  path: (string | number)[];
  message: string;
}

/** The first thing in a payload PostgreSQL's jsonb cannot store, or null. The payload is what
 *  JSON.stringify makes of the value (an object's toJSON is followed, as it does). Too deep is
 *  reported at the payload itself (a path of 64 indexes helps nobody). */
export function payloadProblem(value: unknown): PayloadProblem | null {
  if (isStorablePayload(value)) return null;
  const path: (string | number)[] = [];
  const walk = (v: unknown, depth: number): string | null => {
    if (typeof v === 'string') return isStorable(v) ? null : NOT_STORABLE;
    if (typeof v !== 'object' || v === null) return null;
    if (typeof (v as { toJSON?: unknown }).toJSON === 'function') return walk((v as { toJSON(): unknown }).toJSON(), depth);
    if (depth >= MAX_PAYLOAD_DEPTH) return TOO_DEEP;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i += 1) {
        path.push(i);
        const problem = walk(v[i], depth + 1);
        if (problem) return problem;
        path.pop();
      }
      return null;
    }
    for (const key of Object.keys(v)) {
      if (!isStorable(key)) return `has a key that ${NOT_STORABLE}`;
      path.push(key);
      const problem = walk((v as Record<string, unknown>)[key], depth + 1);
      if (problem) return problem;
      path.pop();
    }
    return null;
  };
  const message = walk(value, 0);
  if (message === null) return null;
  return { path: message === TOO_DEEP ? [] : path, message };
}
