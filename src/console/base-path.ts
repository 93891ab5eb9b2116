// The console's base path (behind a proxy) and the error for a console that must not start as
// configured: apart from server.ts so that the CLI checks --base-path without loading the server.
/** A console that must not start as configured: the message says what to change. */
export class ConsoleConfigError extends Error {
  override name = 'ConsoleConfigError';
}

/** "/tc/", "tc" -> "/tc"; "/" or "" -> "". */
export function normalizeBasePath(value: string): string {
  const trimmed = value.trim().replace(/\/+$/, '');
  if (trimmed === '') return '';
  const path = trimmed.startsWith('/') ? trimmed : `/${trimmed}`;
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(path))
    throw new ConsoleConfigError(`--base-path must be a URL path such as /tc (letters, digits, . _ ~ -), got "${value}"`);
  return path;
}
