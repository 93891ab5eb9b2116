// Loads a statement file (src/<module>/queries/<name>.sql). Each file holds one statement with a
// header naming its $n parameters; files are read once, on first use.
import { readFileSync } from 'node:fs';

const cache = new Map<string, string>();

export function query(dir: URL, name: string): string {
  const url = new URL(`queries/${name}.sql`, dir);
  let text = cache.get(url.href);
  if (text === undefined) {
    text = readFileSync(url, 'utf8');
    cache.set(url.href, text);
  }
  return text;
}
