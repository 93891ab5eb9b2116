// --help for the bench scripts: their usage is the comment block each file starts with.
import { readFileSync } from 'node:fs';

export function printUsage(scriptUrl: string): void {
  const lines = readFileSync(new URL(scriptUrl), 'utf8').split('\n');
  const header = lines.slice(0, lines.findIndex((l) => !l.startsWith('//')));
  console.log(header.map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
}
