// The running package's version, read from its own package.json at run time: one source of truth
// for `timeout-center --version`, logs, spans, the schema contract, the process registry, /readyz
// and tc_build_info. The path is relative to this module, so it resolves the same from src/
// (tests), dist/ (a build) and node_modules/timeout-center/dist/ (an installed package): in each,
// package.json is one level up.
import { readFileSync } from 'node:fs';

function readVersion(): string {
  const url = new URL('../package.json', import.meta.url);
  const pkg = JSON.parse(readFileSync(url, 'utf8')) as { name?: unknown; version?: unknown };
  if (pkg.name !== 'timeout-center' || typeof pkg.version !== 'string') {
    throw new Error(`${url.pathname} is not timeout-center's package.json (name ${String(pkg.name)}, version ${String(pkg.version)}): reinstall the package`);
  }
  return pkg.version;
}

export const VERSION: string = readVersion();
