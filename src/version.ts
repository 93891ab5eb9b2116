// This build's version: the package's own package.json, read at run time so that the CLI, the
// schema contract, the fleet registry, /readyz and the metrics all say the same thing, from src/
// (tests), dist/ (a checkout) and an installed package alike.
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

export const VERSION: string = pkg.version;
