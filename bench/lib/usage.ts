// --help for the bench scripts: their usage is the comment block each file starts with.
import { readFileSync } from 'node:fs';

export function printUsage(scriptUrl: string): void {
  const lines = readFileSync(new URL(scriptUrl), 'utf8').split('\n');
  const header = lines.slice(
    0,
    lines.findIndex((l) => !l.startsWith('//')),
  );
  console.log(header.map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
}

/** Count options (`--n 200_000`): the given ones parsed, the rest from defaults. Bad input: one
 *  line saying which option and why, exit 2, nothing created. */
export function positiveCounts<K extends string>(
  tool: string,
  given: Partial<Record<NoInfer<K>, string | undefined>>,
  defaults: Record<K, number>,
): Record<K, number> {
  const out = { ...defaults };
  for (const name of Object.keys(defaults) as K[]) {
    const raw = given[name];
    if (raw === undefined) continue;
    const v = Number(raw.replace(/_/g, ''));
    if (!Number.isSafeInteger(v) || v < 1) failUsage(tool, `--${name} must be a positive integer, got ${raw}`);
    out[name] = v;
  }
  return out;
}

/** Bad input to a bench script: one line, exit 2. */
export function failUsage(tool: string, message: string): never {
  console.error(`${tool}: ${message} (see --help)`);
  process.exit(2);
}
