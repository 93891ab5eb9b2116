// Shared pieces of the verbs: the one --config option and how every verb reads it, the database
// connection (DATABASE_URL, else the config's databaseUrl; no Redis), argument parsers whose errors
// exit 2 before anything is written, and the two output styles (aligned tables for people, --json
// for scripts). Exit codes: exit-codes.ts.
import { hostname, userInfo } from 'node:os';
import { CommanderError, Option } from 'commander';
import { loadConfig, type LoadedConfig } from '../../config.js';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { assertMigrated } from '../../db/migrate.js';
import { createKysely } from '../../db/kysely.js';
import { createPool } from '../../db/pool.js';
import type { Database } from '../../db/schema.js';
import { createLogger } from '../../observability/logger.js';
import { checkPostgres } from '../../db/reachability.js';

/** Bad input: one line on stderr, exit 2, nothing changed. */
export function inputError(message: string): CommanderError {
  return new CommanderError(2, 'tc.input', message);
}

/** The database cannot serve the verb (schema missing or old): exit 3, nothing done. */
export function unavailableError(message: string): CommanderError {
  return new CommanderError(3, 'tc.unavailable', message);
}

export const databaseOption = () =>
  new Option('--database-url <url>', "PostgreSQL URL of the timeout center (default: the config's databaseUrl)").env('DATABASE_URL');

/** -c/--config: the one definition, given to every verb by main.ts (the same flag, the same
 *  variable, read the same way by readConfig below). */
export const configOption = () =>
  new Option(
    '-c, --config <file>',
    'config file (YAML or JSON, see config.example.yaml): kinds and handlers, stores and business databases, Redis, retention; the operator verbs then cover the center and every store',
  ).env('TIMEOUT_CENTER_CONFIG');

/**
 * The config as every operator verb reads it: Redis not needed, a store whose URL variable is
 * unset listed in `unsetUrls` (the verb names it and goes on with the others), --database-url
 * winning over DATABASE_URL and the file. Undefined without --config / TIMEOUT_CENTER_CONFIG.
 * A file that does not load is bad input (exit 2).
 */
export function readConfig(opts: { config?: string | undefined; databaseUrl?: string | undefined }): LoadedConfig | undefined {
  if (!opts.config) return undefined;
  const env = opts.databaseUrl ? { ...process.env, DATABASE_URL: opts.databaseUrl } : process.env;
  return loadConfig({ path: opts.config, env, needsRedis: false, allowUnsetUrls: true });
}

/** The center's URL: --database-url, else DATABASE_URL, else the config's databaseUrl. */
export function centerUrl(opts: DbOptions): string {
  const config = readConfig(opts); // read (and checked) whenever given, like every verb does
  const url = opts.databaseUrl ?? config?.databaseUrl;
  if (!url) {
    throw inputError(
      'DATABASE_URL is not set: set it (e.g. DATABASE_URL=postgres://user@127.0.0.1:5432/app), pass --database-url, or give a config with databaseUrl',
    );
  }
  return url;
}
/** Who made the change, for the audit log: --actor, else $USER@host. */
export function defaultActor(): string {
  let user = process.env['USER'] || process.env['LOGNAME'];
  if (!user) {
    try {
      user = userInfo().username;
    } catch {
      user = 'unknown';
    }
  }
  return `${user}@${hostname()}`;
}

export const actorOption = () => new Option('--actor <who>', 'who makes the change, recorded in timeout_center.audit_log (default: $USER@host)');

export const jsonOption = () => new Option('--json', 'print JSON (one document) for scripts instead of a table');

export type { DbTimestamp } from '../../db/schema.js';

export interface DbOptions {
  databaseUrl?: string;
  /** Only this store (across.ts: `center` or a store of the config). */
  store?: string;
  /** The config naming the stores (across.ts). */
  config?: string;
}

/** Opens a small pool, checks the server and the schema, runs fn, closes everything. */
export async function withDatabase<T>(opts: DbOptions, fn: (db: Kysely<Database>, pool: pg.Pool) => Promise<T>): Promise<T> {
  const url = centerUrl(opts);
  const pool = createPool({ connectionString: url, max: 2, applicationName: 'timeout-center cli', logger: createLogger('silent') });
  const db = createKysely(pool);
  try {
    await checkPostgres(pool, url);
    try {
      await assertMigrated(pool);
    } catch (err) {
      throw unavailableError((err as Error).message);
    }
    return await fn(db, pool);
  } finally {
    await db.destroy(); // ends the pool, but only once kysely itself has run a query on it
    if (!pool.ended && !pool.ending) await pool.end(); // a verb that used the pool alone (flow.ts)
  }
}

/** A positive integer id (timeouts, shards, scans are bigint identities). */
export function parseId(value: string, flag: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1) {
    throw inputError(`${flag} must be a positive integer id, got "${value}"`);
  }
  return n;
}

/** For repeatable options that take ids: `--id 4 --id 7` or `--id 4,7`. */
export function idList(flag: string) {
  return (value: string, previous: number[] | undefined): number[] => [...(previous ?? []), ...value.split(',').map((v) => parseId(v.trim(), flag))];
}

export function parseLimit(value: string, flag = '--limit'): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < 1 || n > 100_000) throw inputError(`${flag} must be an integer from 1 to 100000, got "${value}"`);
  return n;
}

/** Milliseconds from "7d", "12h", "30m", "45s", "500ms" or a bare number of milliseconds. */
export function parseDuration(value: string, flag: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(value);
  if (!m) throw inputError(`${flag} must be a duration such as 7d, 12h, 30m, 45s or a number of milliseconds, got "${value}"`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 'ms') as 'ms' | 's' | 'm' | 'h' | 'd'];
  return Math.round(Number(m[1]) * unit);
}

/** Fails with the list of known kinds when `kind` is not declared in timeout_center.kinds. */
export async function assertKind(db: Kysely<Database>, kind: string): Promise<void> {
  const rows = await db.selectFrom('timeout_center.kinds').select('kind').orderBy('kind').execute();
  if (!rows.some((r) => r.kind === kind)) {
    const known = rows.map((r) => r.kind).join(', ') || '(none: run `timeout-center migrate` with a config)';
    throw inputError(`unknown kind "${kind}"; known kinds: ${known}`);
  }
}

// Output ------------------------------------------------------------------------------------------

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export interface Column<T> {
  header: string;
  value: (row: T) => string | number | null | undefined;
  /** Right-align (numbers); default: right when every value is a number. */
  align?: 'left' | 'right';
  /** Cut longer cells to this many characters (with …). */
  max?: number;
}

/** An aligned plain-text table, header in capitals, "-" for empty cells. */
export function table<T>(rows: T[], columns: Column<T>[]): string {
  const cells = rows.map((row) =>
    columns.map((c) => {
      const v = c.value(row);
      let text = v === null || v === undefined || v === '' ? '-' : String(v);
      text = text.replace(/\s+/g, ' ');
      if (c.max && text.length > c.max) text = `${text.slice(0, c.max - 1)}…`;
      return text;
    }),
  );
  const numeric = (c: Column<T>) => rows.some((r) => typeof c.value(r) === 'number') && rows.every((r) => typeof c.value(r) === 'number' || c.value(r) == null);
  const right = columns.map((c) => (c.align ? c.align === 'right' : numeric(c)));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => (right[i] ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.header.toUpperCase())), ...cells.map(line)].join('\n');
}

export function print(text: string): void {
  process.stdout.write(`${text}\n`);
}

export { formatSeconds, formatTime } from '../../format.js';
