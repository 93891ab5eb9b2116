// The statement-file parser behind scripts/compile-sql.mjs, importable on its own so that a unit
// test can feed it statements (test/unit/sql-statements.test.ts).
//
// A statement file (src/<module>/queries/<name>.sql) is one statement with a comment header. Besides
// the human description of its $n parameters, the header carries machine-readable lines, which the
// compiler reads and leaves out of the statement text it emits (so the text PostgreSQL receives is
// the file without them):
//
//   -- @params shardId: number, kind: string, claimLimit: number
//        the named inputs, in $1, $2, ... order, each with its TypeScript type. Several @params
//        lines continue one another (a long list). Required when the statement uses any $n; the
//        highest $n used (outside comments, quoted literals and dollar-quoted bodies) must equal
//        the number of names, and each $1..$n must be used.
//   -- @slot handler tc:handler
//        a named slot: the one line of the statement carrying the comment marker `-- tc:handler` is
//        the slot's default, which a composition (db/queries.ts compose()) may replace by other
//        text. A declared slot whose marker is missing, or found on more than one line, fails the
//        build.

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** An error in a statement file; its message names the file. */
export class StatementError extends Error {
  constructor(file, message) {
    super(`${file}: ${message}`);
    this.name = 'StatementError';
  }
}

/**
 * The positional parameters ($1, $2, ...) a statement uses, outside `--` and `/* *\/` comments,
 * quoted literals and identifiers, and dollar-quoted bodies.
 */
export function usedParameters(sql) {
  const used = new Set();
  let i = 0;
  while (i < sql.length) {
    const c = sql[i];
    if (c === "'" || c === '"') {
      let j = i + 1;
      while (j < sql.length && !(sql[j] === c && sql[j + 1] !== c)) j += sql[j] === c ? 2 : 1;
      i = j + 1;
    } else if (c === '-' && sql[i + 1] === '-') {
      const end = sql.indexOf('\n', i);
      i = end < 0 ? sql.length : end;
    } else if (c === '/' && sql[i + 1] === '*') {
      const end = sql.indexOf('*/', i + 2);
      i = end < 0 ? sql.length : end + 2;
    } else if (c === '$') {
      const tag = /\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$/y;
      tag.lastIndex = i;
      const quote = tag.exec(sql);
      if (quote) {
        const end = sql.indexOf(quote[0], i + quote[0].length);
        i = end < 0 ? sql.length : end + quote[0].length;
        continue;
      }
      const number = /\$([0-9]+)/y;
      number.lastIndex = i;
      const param = number.exec(sql);
      if (param) {
        used.add(Number(param[1]));
        i += param[0].length;
      } else {
        i += 1;
      }
    } else if (/[A-Za-z0-9_]/.test(c)) {
      // An identifier or number: a `$` inside one (a$1) is not a parameter.
      while (i < sql.length && /[A-Za-z0-9_$]/.test(sql[i])) i += 1;
    } else {
      i += 1;
    }
  }
  return used;
}

/** Splits "a: number, b: Record<string, number>" at its top-level commas. */
function splitTopLevel(list) {
  const parts = [];
  let depth = 0;
  let from = 0;
  for (let i = 0; i < list.length; i += 1) {
    const c = list[i];
    if ('<([{'.includes(c)) depth += 1;
    else if ('>)]}'.includes(c)) depth -= 1;
    else if (c === ',' && depth === 0) {
      parts.push(list.slice(from, i));
      from = i + 1;
    }
  }
  parts.push(list.slice(from));
  return parts.map((p) => p.trim()).filter((p) => p.length > 0);
}

const ANNOTATION = /^--\s*@(\w+)\b(.*)$/;

/**
 * Parses one statement file. key: '<module>/<name>'; file: its path, for error messages.
 * Returns { key, text, params: [{ name, type }], slots: [{ name, marker, start, end }] }, where
 * text is the file without its annotation lines and each slot's [start, end) is its line in text
 * (without the line break). Throws StatementError naming the file and what is wrong.
 */
export function parseStatement(key, source, file = key) {
  const params = [];
  const slotDecls = [];
  let sawParams = false;
  const kept = [];
  for (const line of source.split('\n')) {
    const m = ANNOTATION.exec(line.trim());
    if (!m) {
      kept.push(line);
      continue;
    }
    const [, tag, rest] = m;
    if (tag === 'params') {
      sawParams = true;
      for (const part of splitTopLevel(rest)) {
        const colon = part.indexOf(':');
        const name = colon < 0 ? part : part.slice(0, colon).trim();
        const type = colon < 0 ? '' : part.slice(colon + 1).trim();
        if (!IDENT.test(name) || type === '') throw new StatementError(file, `@params: "${part}" is not "name: type"`);
        if (params.some((p) => p.name === name)) throw new StatementError(file, `@params: ${name} is declared twice`);
        params.push({ name, type });
      }
    } else if (tag === 'slot') {
      const [name, marker, ...extra] = rest.trim().split(/\s+/);
      if (!name || !IDENT.test(name) || !marker || extra.length > 0)
        throw new StatementError(file, `@slot: expected "-- @slot <name> <marker>", got "${line.trim()}"`);
      if (slotDecls.some((s) => s.name === name)) throw new StatementError(file, `@slot: ${name} is declared twice`);
      slotDecls.push({ name, marker });
    } else {
      throw new StatementError(file, `unknown annotation @${tag} (known: @params, @slot)`);
    }
  }
  const text = kept.join('\n');

  const used = usedParameters(text);
  const highest = used.size === 0 ? 0 : Math.max(...used);
  if (highest > 0 && !sawParams) throw new StatementError(file, `uses $1..$${highest} but has no "-- @params name: type, ..." line naming them`);
  if (highest !== params.length)
    throw new StatementError(
      file,
      `@params declares ${params.length} parameter(s) (${params.map((p) => p.name).join(', ') || 'none'}) but the statement's highest parameter is $${highest}`,
    );
  for (let n = 1; n <= highest; n += 1) {
    if (!used.has(n)) throw new StatementError(file, `$${n} (${params[n - 1].name}) is declared but the statement never uses it`);
  }

  const slots = slotDecls.map(({ name, marker }) => {
    const escaped = marker.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const pattern = new RegExp(`^.*-- ${escaped}(?![\\w:-]).*$`, 'gm');
    const found = [...text.matchAll(pattern)];
    if (found.length !== 1)
      throw new StatementError(file, `@slot ${name}: expected exactly one line marked "-- ${marker}", found ${found.length === 0 ? 'none' : found.length}`);
    const start = found[0].index;
    return { name, marker, start, end: start + found[0][0].length };
  });
  return { key, text, params, slots };
}

/** The generated TypeScript module for the parsed statements. */
export function renderModule(parsed) {
  const lines = [
    '// Generated by scripts/compile-sql.mjs from src/**/queries/*.sql: do not edit (npm run build',
    '// regenerates it). Each statement keyed <module>/<file name>: its text (the file without its',
    '// @params / @slot lines), its parameter names in $n order, its slots ([start, end) of the',
    "// slot's line in the text), and below, its input type.",
    'export const statements = {',
  ];
  for (const s of parsed) {
    const slots = s.slots.map((sl) => `${sl.name}: [${sl.start}, ${sl.end}]`).join(', ');
    lines.push(
      `  ${JSON.stringify(s.key)}: {`,
      `    text: ${JSON.stringify(s.text)},`,
      `    params: [${s.params.map((p) => JSON.stringify(p.name)).join(', ')}],`,
      `    slots: {${slots ? ` ${slots} ` : ''}},`,
      '  },',
    );
  }
  lines.push('} as const;', '', 'export type StatementName = keyof typeof statements;', '');
  lines.push("/** Each statement's named inputs, with the types its @params line declares. */", 'export interface StatementInputs {');
  for (const s of parsed) {
    const fields = s.params.map((p) => `${p.name}: ${p.type}`).join('; ');
    lines.push(`  ${JSON.stringify(s.key)}: ${fields ? `{ ${fields} }` : 'Record<never, never>'};`);
  }
  lines.push('}', '');
  return lines.join('\n');
}
