// A lean check compiled from a zod schema (schemas.ts): the API's schemas stay written once, in
// zod, and zod stays the judge of every answer it gives; this only saves zod's per-value machinery
// (a payload object per value, the issue objects of the union branch that did not match, the copy
// of every object) on the common case, an input zod accepts as it is. A batch of 5,000 timeouts is
// 5,000 unions of two closed objects: zod spent ~5 ms on one, the lean check well under 1 ms.
//
// The compiled function answers, for a value:
//   OK      zod accepts it, and its output is the value itself (same keys, same values): the caller
//           may use the value without zod;
//   FAIL    zod refuses it (exactly: never a value zod would accept);
//   UNSURE  this check cannot tell (zod decides).
// A caller runs zod on anything but OK, so an error is always zod's own, with its path and message.
// leanCheck() returns null for a schema using anything it does not know (a transform, a refinement,
// a default, a codec, a record, an unknown check...): that schema is left to zod entirely. A
// refinement made with predicateCheck() is known: a pure predicate it runs in zod's place.
// test/api/lean-check.test.ts holds it to zod's verdicts on random and edge-case inputs.
import { z } from 'zod';

export const OK = 0;
export const FAIL = 1;
export const UNSURE = 2;
export type Verdict = typeof OK | typeof FAIL | typeof UNSURE;
export type LeanCheck = (value: unknown) => Verdict;

interface CheckDef {
  check: string;
  minimum?: number;
  maximum?: number;
  value?: unknown;
  inclusive?: boolean;
  format?: string;
  pattern?: RegExp;
  when?: unknown;
}

interface AnyDef {
  type: string;
  checks?: { _zod: { def: CheckDef } }[];
  coerce?: boolean;
  format?: string;
  pattern?: RegExp;
  shape?: Record<string, z.core.$ZodType>;
  catchall?: z.core.$ZodType;
  element?: z.core.$ZodType;
  options?: z.core.$ZodType[];
  inclusive?: boolean;
  innerType?: z.core.$ZodType;
  values?: unknown[];
  entries?: Record<string, unknown>;
}

const defOf = (schema: z.core.$ZodType): AnyDef => schema._zod.def as unknown as AnyDef;

// The `when` zod gives a length check by default (the value has a length); any other is unknown here.
const DEFAULT_LENGTH_WHEN = (defOf(z.string().min(1)).checks?.[0]?._zod.def.when ?? null) as unknown;

type Test = (value: never) => Verdict;

/** The predicates of the checks predicateCheck() made, by check. */
const predicates = new WeakMap<object, (value: unknown) => boolean>();

/**
 * A zod check that refuses exactly the values `accepts` refuses, with the issue `issue` describes
 * (its path inside the value), and changes nothing: the lean check runs `accepts` in its place
 * (true: OK, false: FAIL, and zod then tells why).
 */
export function predicateCheck<T>(accepts: (value: T) => boolean, issue: (value: T) => { message: string; path: (string | number)[] }): z.core.$ZodCheck<T> {
  const check = z.superRefine<T>((value, ctx) => {
    if (accepts(value)) return;
    const { message, path } = issue(value);
    ctx.addIssue({ code: 'custom', message, path, input: value });
  });
  predicates.set(check, accepts as (value: unknown) => boolean);
  return check;
}

/** The predicates of a schema's checks, or null when one of them is not predicateCheck()'s. */
function knownPredicates(def: AnyDef): ((value: unknown) => boolean)[] | null {
  const found: ((value: unknown) => boolean)[] = [];
  for (const c of def.checks ?? []) {
    const p = predicates.get(c);
    if (!p) return null;
    found.push(p);
  }
  return found;
}

/** A string's length as zod counts it: in Unicode code points (a surrogate pair is one). */
function codePoints(s: string): number {
  let count = s.length;
  for (let i = 0; i < s.length - 1; i += 1) {
    if ((s.charCodeAt(i) & 0xfc00) === 0xd800 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      count -= 1;
      i += 1;
    }
  }
  return count;
}

/** Length bounds, counted as zod counts them: a string's UTF-16 length decides without counting
 *  code points unless it could (a code point is one or two units). */
function lengthChecks(checks: CheckDef[]): Test[] | null {
  const tests: Test[] = [];
  for (const c of checks) {
    if (c.when !== undefined && c.when !== DEFAULT_LENGTH_WHEN) return null;
    if (c.check === 'min_length' && typeof c.minimum === 'number') {
      const min = c.minimum;
      tests.push((v: { length: number }) => {
        const n = v.length;
        if (n < min) return FAIL;
        if (typeof v !== 'string' || Math.ceil(n / 2) >= min) return OK;
        return codePoints(v) >= min ? OK : FAIL;
      });
    } else if (c.check === 'max_length' && typeof c.maximum === 'number') {
      const max = c.maximum;
      tests.push((v: { length: number }) => (v.length <= max || (typeof v === 'string' && codePoints(v) <= max) ? OK : FAIL));
    } else {
      return null;
    }
  }
  return tests;
}

function runTests(tests: Test[], value: unknown): Verdict {
  let verdict: Verdict = OK;
  for (const t of tests) {
    const r = t(value as never);
    if (r === FAIL) return FAIL;
    if (r === UNSURE) verdict = UNSURE;
  }
  return verdict;
}

function stringCheck(def: AnyDef): LeanCheck | null {
  if (def.coerce) return null;
  const tests: Test[] = [];
  // A string format of its own (z.iso.datetime): zod's check is its pattern, nothing else.
  if (def.format !== undefined) {
    if (def.format !== 'datetime' || !(def.pattern instanceof RegExp)) return null;
    const pattern = def.pattern;
    tests.push((v: string) => {
      pattern.lastIndex = 0;
      return pattern.test(v) ? OK : FAIL;
    });
  }
  const lengths: CheckDef[] = [];
  for (const { _zod } of def.checks ?? []) {
    const c = _zod.def;
    if (c.check === 'min_length' || c.check === 'max_length') lengths.push(c);
    else if (c.check === 'string_format' && c.format === 'regex' && c.pattern instanceof RegExp && c.when === undefined) {
      const pattern = c.pattern;
      tests.push((v: string) => {
        pattern.lastIndex = 0;
        return pattern.test(v) ? OK : FAIL;
      });
    } else return null;
  }
  const length = lengthChecks(lengths);
  if (!length) return null;
  tests.push(...length);
  return (v) => (typeof v !== 'string' ? FAIL : runTests(tests, v));
}

function numberCheck(def: AnyDef): LeanCheck | null {
  if (def.coerce) return null;
  const tests: Test[] = [];
  const all = [...(def.format !== undefined ? [{ check: 'number_format', format: def.format } as CheckDef] : []), ...(def.checks ?? []).map((c) => c._zod.def)];
  for (const c of all) {
    if (c.when !== undefined) return null;
    if (c.check === 'number_format' && c.format === 'safeint') tests.push((v: number) => (Number.isSafeInteger(v) ? OK : FAIL));
    else if (c.check === 'number_format' && c.format === 'float64')
      continue; // every finite number
    else if (c.check === 'greater_than' && typeof c.value === 'number') {
      const min = c.value;
      tests.push(c.inclusive ? (v: number) => (v >= min ? OK : FAIL) : (v: number) => (v > min ? OK : FAIL));
    } else if (c.check === 'less_than' && typeof c.value === 'number') {
      const max = c.value;
      tests.push(c.inclusive ? (v: number) => (v <= max ? OK : FAIL) : (v: number) => (v < max ? OK : FAIL));
    } else return null;
  }
  return (v) => (typeof v !== 'number' || !Number.isFinite(v) ? FAIL : runTests(tests, v));
}

function objectCheck(def: AnyDef): LeanCheck | null {
  if ((def.checks ?? []).length > 0 || !def.shape) return null;
  const catchall = def.catchall === undefined ? 'strip' : defOf(def.catchall).type;
  if (catchall !== 'strip' && catchall !== 'never' && catchall !== 'unknown') return null;
  const keys = Object.keys(def.shape);
  const checks: LeanCheck[] = [];
  for (const k of keys) {
    const c = leanCheck(def.shape[k]!);
    if (!c) return null;
    checks.push(c);
  }
  const known = new Set(keys);
  const n = keys.length;
  return (v) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return FAIL;
    const o = v as Record<string, unknown>;
    let verdict: Verdict = OK;
    if (catchall !== 'unknown') {
      for (const k in o) {
        if (known.has(k)) continue;
        // A closed object refuses a key it does not name; an open one drops it (not the value as is).
        if (catchall === 'never') return FAIL;
        verdict = UNSURE;
      }
    }
    for (let i = 0; i < n; i += 1) {
      const r = checks[i]!(o[keys[i]!]);
      if (r === FAIL) return FAIL;
      if (r === UNSURE) verdict = UNSURE;
    }
    return verdict;
  };
}

function arrayCheck(def: AnyDef): LeanCheck | null {
  if (!def.element) return null;
  const element = leanCheck(def.element);
  const length = lengthChecks((def.checks ?? []).map((c) => c._zod.def));
  if (!element || !length) return null;
  return (v) => {
    if (!Array.isArray(v)) return FAIL;
    let verdict = runTests(length, v);
    if (verdict === FAIL) return FAIL;
    for (let i = 0; i < v.length; i += 1) {
      const r = element(v[i]);
      if (r === FAIL) return FAIL;
      if (r === UNSURE) verdict = UNSURE;
    }
    return verdict;
  };
}

/** zod's union answers with its first option that accepts the value: the first OK here is that
 *  option only if every option before it was a certain FAIL. */
function unionCheck(def: AnyDef): LeanCheck | null {
  if (def.inclusive === false || !def.options || def.options.length === 0) return null;
  const options: LeanCheck[] = [];
  for (const o of def.options) {
    const c = leanCheck(o);
    if (!c) return null;
    options.push(c);
  }
  return (v) => {
    for (const option of options) {
      const r = option(v);
      if (r !== FAIL) return r;
    }
    return FAIL;
  };
}

/** The lean check of a zod schema, or null when the schema uses anything it does not know. */
export function leanCheck(schema: z.core.$ZodType): LeanCheck | null {
  const def = defOf(schema);
  const noChecks = (def.checks ?? []).length === 0;
  switch (def.type) {
    case 'string':
      return stringCheck(def);
    case 'number':
      return numberCheck(def);
    case 'boolean':
      return def.coerce || !noChecks ? null : (v) => (typeof v === 'boolean' ? OK : FAIL);
    case 'unknown':
    case 'any': {
      const tests = knownPredicates(def);
      if (!tests) return null;
      if (tests.length === 0) return () => OK;
      return (v) => (tests.every((t) => t(v)) ? OK : FAIL);
    }
    case 'literal': {
      const values = def.values;
      if (!noChecks || !Array.isArray(values)) return null;
      return (v) => (values.includes(v) ? OK : FAIL);
    }
    case 'enum': {
      const values = Object.values(def.entries ?? {});
      if (!noChecks || values.length === 0 || !values.every((e) => typeof e === 'string')) return null;
      const set = new Set<unknown>(values);
      return (v) => (set.has(v) ? OK : FAIL);
    }
    case 'optional':
    case 'nullable': {
      const inner = noChecks && def.innerType ? leanCheck(def.innerType) : null;
      if (!inner) return null;
      const none = def.type === 'optional' ? undefined : null;
      return (v) => (v === none ? OK : inner(v));
    }
    case 'object':
      return objectCheck(def);
    case 'array':
      return arrayCheck(def);
    case 'union':
      return noChecks ? unionCheck(def) : null;
    default:
      return null;
  }
}
