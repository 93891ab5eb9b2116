// Loading the configuration: a JSON or YAML file (or an object), command-line overrides laid over
// it before it is validated, then DATABASE_URL / REDIS_URL and the business databases' URLs from
// the environment, each problem a line of one ConfigError.
import { readFileSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { parseConnectionString } from '../db/connection-string.js';
import { resolveRedis, type RedisConnectionConfig } from '../redis-config.js';
import { ConfigError, parseConfig, type Config, type ConfigInput, type LoadedConfig } from './schema.js';

/** Reads a JSON or YAML file. */
export function readConfigFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError(path, [
      code === 'ENOENT' ? 'file not found (pass --config <file> or set TIMEOUT_CENTER_CONFIG)' : `cannot read: ${(err as Error).message}`,
    ]);
  }
  try {
    const ext = extname(path).toLowerCase();
    return ext === '.json' ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new ConfigError(path, [`not valid ${extname(path) === '.json' ? 'JSON' : 'YAML'}: ${(err as Error).message}`]);
  }
}

export interface LoadOptions {
  /** Path of the config file; falls back to TIMEOUT_CENTER_CONFIG. */
  path?: string | undefined;
  /** Config object instead of a file (embedding, tests). */
  object?: ConfigInput;
  env?: NodeJS.ProcessEnv;
  /** Command-line flags (e.g. --concurrency): merged into the file's object before it is
   *  validated, so they meet the same bounds and cross-field checks as the file. */
  overrides?: ConfigOverrides;
  /** false: a missing Redis setting is not an error (the operator verbs that read databases only);
   *  redisConnection is then a single node with an empty URL. */
  needsRedis?: boolean;
  /** true: a business database whose urlEnv variable is not set is listed in `unsetUrls` instead of
   *  failing the load (the operator verbs show the rest and name it); false (processes): a ConfigError. */
  allowUnsetUrls?: boolean;
}

export interface ConfigOverrides {
  worker?: { concurrency?: number };
  httpPort?: number;
}

/** The file's object with the overrides laid over it (one level deep per section). */
function withOverrides(raw: unknown, overrides: ConfigOverrides | undefined): unknown {
  if (!overrides || typeof raw !== 'object' || raw === null || Array.isArray(raw)) return raw;
  const out: Record<string, unknown> = { ...(raw as Record<string, unknown>) };
  if (overrides.httpPort !== undefined) out['httpPort'] = overrides.httpPort;
  if (overrides.worker) {
    const section = out['worker'];
    const base = typeof section === 'object' && section !== null && !Array.isArray(section) ? (section as Record<string, unknown>) : {};
    out['worker'] = { ...base, ...overrides.worker };
  }
  return out;
}

/** Loads config from a file or object, then applies DATABASE_URL / REDIS_URL from the environment. */
export function loadConfig(options: LoadOptions): LoadedConfig {
  const env = options.env ?? process.env;
  const path = options.path ?? env['TIMEOUT_CENTER_CONFIG'];
  let raw: unknown;
  let source: string;
  let baseDir = process.cwd();
  if (options.object) {
    raw = options.object;
    source = 'config object';
  } else if (path) {
    source = resolve(path);
    raw = readConfigFile(source);
    baseDir = resolve(source, '..');
  } else {
    throw new ConfigError('(none)', ['no config file given: pass --config <file> or set TIMEOUT_CENTER_CONFIG (see config.example.yaml)']);
  }
  const config = parseConfig(withOverrides(raw, options.overrides), source);
  const databaseUrl = env['DATABASE_URL'] || config.databaseUrl;
  const missing: string[] = [];
  if (!databaseUrl) missing.push('databaseUrl: not set: set DATABASE_URL (e.g. postgres://user@127.0.0.1:5432/db) or databaseUrl in the file');
  else missing.push(...connectionStringProblems(env['DATABASE_URL'] ? 'DATABASE_URL' : 'databaseUrl', databaseUrl));
  let redis = resolveRedis(config, env);
  if (Array.isArray(redis) && options.needsRedis === false) redis = { mode: 'single', url: '' };
  if (Array.isArray(redis)) missing.push(...redis);
  const unsetUrls: Record<string, string> | undefined = options.allowUnsetUrls ? {} : undefined;
  const businessDatabaseUrls = missing.length > 0 ? {} : resolveBusinessDatabaseUrls(config, source, env, unsetUrls);
  for (const [name, url] of Object.entries(businessDatabaseUrls)) missing.push(...connectionStringProblems(`businessDatabases.${name}`, url));
  if (missing.length > 0) throw new ConfigError(source, missing);
  const redisConnection = redis as RedisConnectionConfig;
  const redisUrl = redisConnection.mode === 'single' ? redisConnection.url : '';
  return { ...config, databaseUrl: databaseUrl!, redisUrl, redisConnection, baseDir, source, businessDatabaseUrls, ...(unsetUrls ? { unsetUrls } : {}) };
}

/** A connection string (URL or key-value, one host or a list: db/connection-string.ts) that
 *  cannot be used, as a ConfigError line naming where it came from. */
function connectionStringProblems(where: string, url: string): string[] {
  try {
    parseConnectionString(url);
    return [];
  } catch (err) {
    return [`${where}: ${(err as Error).message}`];
  }
}

/** Each business database's URL (urlEnv read from the environment); a missing variable is a
 *  ConfigError naming it, or, given `unset`, recorded there (name -> variable) and left out. */
export function resolveBusinessDatabaseUrls(
  config: Config,
  source: string,
  env: NodeJS.ProcessEnv = process.env,
  unset?: Record<string, string>,
): Record<string, string> {
  const businessDatabaseUrls: Record<string, string> = {};
  for (const [name, db] of Object.entries(config.businessDatabases)) {
    const url = db.url ?? env[db.urlEnv!];
    if (!url && unset) {
      unset[name] = db.urlEnv!;
      continue;
    }
    if (!url) {
      throw new ConfigError(source, [
        `businessDatabases.${name}.urlEnv: the environment variable ${db.urlEnv} is not set (it should hold the URL of business database ${name})`,
      ]);
    }
    businessDatabaseUrls[name] = url;
  }
  return businessDatabaseUrls;
}
