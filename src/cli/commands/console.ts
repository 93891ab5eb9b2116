// `timeout-center console`: the web console (src/console/) on its own, needing only DATABASE_URL (and
// --config for the stores: kinds stored beside their orders);
// and the --console <port> option that serves the same console from a coordinator, worker or
// run process. Auth comes from the environment (TC_CONSOLE_TOKEN, TC_CONSOLE_USER +
// TC_CONSOLE_PASSWORD): never on the command line, where `ps` shows it.
import { CommanderError, Option, type Command } from 'commander';
import { parseConfig, readConfigFile, resolveBusinessDatabaseUrls, type Config, type LoadedConfig } from '../../config.js';
import { assertMigrated } from '../../db/migrate.js';
import { ProcessRegistry } from '../../release/process-registry.js';
import type { SchemaContractError } from '../../release/schema-contract.js';
import { EXIT } from '../exit-codes.js';
import { createPool } from '../../db/pool.js';
import { createLogger, type Logger } from '../../observability/logger.js';
import { checkPostgres } from '../../db/reachability.js';
import { service, type Service } from '../../service.js';
import { storeLayout } from '../../stores/layout.js';
import { StoreDirectory } from '../../stores/store-directory.js';
import { AuthConfigError, authFromEnv } from '../../console/auth.js';
import { ConsoleConfigError, normalizeBasePath } from '../../console/base-path.js';
import type { ConsoleServer } from '../../console/server.js';
import { databaseOption, inputError, parseDuration } from './common.js';

export const DEFAULT_CONSOLE_PORT = 8080;

function parsePort(value: string, flag: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n > 65535) throw inputError(`${flag} must be a port 0..65535, got "${value}"`);
  return n;
}

function basePath(value: string): string {
  try {
    return normalizeBasePath(value);
  } catch (err) {
    throw inputError((err as Error).message);
  }
}

export interface ConsoleFlags {
  host: string;
  basePath: string;
  readOnly: boolean;
  allowUnauthenticated: boolean;
}

export interface StartConsoleInput extends ConsoleFlags {
  databaseUrl: string;
  port: number;
  lagSlaSeconds: number;
  logger: Logger;
  /** The config's kinds and business database URLs: with kinds stored beside their orders, the
   *  console reads and acts in each store too. */
  config?: Pick<LoadedConfig, 'kinds' | 'businessDatabaseUrls'> | undefined;
  /** The `console` command: the process in timeout_center.processes, and what to do when the
   *  schema changes under it to one this version may not run on. */
  onIncompatibleSchema?: (err: SchemaContractError) => void;
}

/** The stores of the config (none: undefined), their pools opened on first use. */
function storeDirectory(input: StartConsoleInput): { directory: StoreDirectory; kinds: Config['kinds'] } | undefined {
  if (!input.config) return undefined;
  const layout = storeLayout(input.config.kinds);
  if (layout.size === 0) return undefined;
  const urls = input.config.businessDatabaseUrls;
  const directory = new StoreDirectory({
    centerUrl: input.databaseUrl,
    stores: new Map([...layout].map(([store, kinds]) => [store, { url: urls[store] ?? '', kinds }])),
    logger: input.logger,
    applicationName: 'timeout-center console',
    connectTimeoutMs: 3000,
  });
  return { directory, kinds: input.config.kinds };
}

/** Opens the console's own small pool (and the stores' directory) and serves; close() stops them. */
export async function serveConsole(input: StartConsoleInput): Promise<ConsoleServer> {
  let auth;
  try {
    auth = authFromEnv();
  } catch (err) {
    if (err instanceof AuthConfigError) throw new CommanderError(2, 'tc.console', err.message);
    throw err;
  }
  const pool = createPool({ connectionString: input.databaseUrl, max: 4, applicationName: 'timeout-center console', logger: input.logger });
  let stores: ReturnType<typeof storeDirectory>;
  let registry: ProcessRegistry | undefined;
  try {
    await checkPostgres(pool, input.databaseUrl);
    await assertMigrated(pool);
    if (input.onIncompatibleSchema) {
      registry = new ProcessRegistry({ pool, role: 'console', logger: input.logger, onIncompatible: input.onIncompatibleSchema });
      await registry.start();
    }
    stores = storeDirectory(input);
    // Loaded here, not at the top: the other verbs start without the console's server modules.
    const { startConsole } = await import('../../console/server.js');
    const server = await startConsole({ ...input, pool, auth, stores });
    return {
      ...server,
      close: async () => {
        await server.close();
        await registry?.stop();
        await stores?.directory.close();
        await pool.end();
      },
    };
  } catch (err) {
    await registry?.stop().catch(() => undefined);
    await stores?.directory.close();
    await pool.end();
    if (err instanceof ConsoleConfigError) throw new CommanderError(2, 'tc.console', err.message);
    throw err;
  }
}

/** --console and its companions on coordinator / worker / run. */
export function addConsoleOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--console <port>', 'also serve the web console on this port (auth from TC_CONSOLE_TOKEN or TC_CONSOLE_USER/TC_CONSOLE_PASSWORD)').argParser(
        (v) => parsePort(v, '--console'),
      ),
    )
    .addOption(new Option('--console-host <host>', 'address the console listens on (non-loopback needs auth)').default('127.0.0.1'))
    .addOption(new Option('--console-base-path <path>', 'serve the console under this sub-path (behind a proxy), e.g. /tc').argParser(basePath))
    .addOption(new Option('--console-read-only', 'the console refuses every action'))
    .addOption(new Option('--console-allow-unauthenticated', 'allow a console without auth on a non-loopback address (a proxy in front authenticates)'));
}

export interface ServeConsoleOpts {
  console?: number;
  consoleHost: string;
  consoleBasePath?: string;
  consoleReadOnly?: boolean;
  consoleAllowUnauthenticated?: boolean;
}

/** The console of a coordinator / worker / run process when --console was given: a service of
 *  the process (runtime.ts), started after the engine and stopped before it. */
export function consoleService(opts: ServeConsoleOpts, config: LoadedConfig, logger: Logger): Service | undefined {
  if (opts.console === undefined) return undefined;
  const port = opts.console;
  let server: ConsoleServer | undefined;
  return service(
    'console',
    async () => {
      server = await serveConsole({
        databaseUrl: config.databaseUrl,
        config,
        port,
        host: opts.consoleHost,
        basePath: opts.consoleBasePath ?? '',
        readOnly: Boolean(opts.consoleReadOnly),
        allowUnauthenticated: Boolean(opts.consoleAllowUnauthenticated),
        lagSlaSeconds: config.alerts.lagSlaMs / 1000,
        logger,
      });
    },
    async () => {
      await server?.close();
      server = undefined;
    },
  );
}

interface ConsoleCommandOpts {
  databaseUrl?: string;
  config?: string;
  port: number;
  host: string;
  basePath?: string;
  readOnly?: boolean;
  allowUnauthenticated?: boolean;
  lagSla?: number;
}

export function registerConsole(program: Command): void {
  program
    .command('console')
    .description('serve the web console and its JSON API: overview, kinds (pause / resume / limit), scans and shards, timeouts, failed, warnings, audit')
    .addOption(databaseOption())
    .addOption(new Option('-p, --port <port>', 'port to serve on (0 = any free port)').argParser((v) => parsePort(v, '--port')).default(DEFAULT_CONSOLE_PORT))
    .addOption(
      new Option('--host <host>', 'address to listen on; a non-loopback one needs auth (TC_CONSOLE_TOKEN or TC_CONSOLE_USER + TC_CONSOLE_PASSWORD)').default(
        '127.0.0.1',
      ),
    )
    .addOption(new Option('--base-path <path>', 'serve under this sub-path (behind a proxy), e.g. /tc').argParser(basePath))
    .addOption(new Option('--read-only', 'refuse every action (403): a console to look, not to touch'))
    .addOption(new Option('--allow-unauthenticated', 'allow serving without auth on a non-loopback address (only when a proxy in front authenticates)'))
    .addOption(
      new Option('--lag-sla <duration>', 'lag SLA for the warnings, e.g. 60s (default: alerts.lagSlaMs of --config, else 60s)').argParser((v) =>
        parseDuration(v, '--lag-sla'),
      ),
    )
    .action(async (opts: ConsoleCommandOpts) => {
      if (!opts.databaseUrl) throw inputError('DATABASE_URL is not set (e.g. DATABASE_URL=postgres://user@127.0.0.1:5432/app), or pass --database-url');
      const parsed = opts.config ? parseConfig(readConfigFile(opts.config), opts.config) : undefined;
      const lagSlaMs = opts.lagSla ?? parsed?.alerts.lagSlaMs ?? 60_000;
      const config = parsed && opts.config ? { kinds: parsed.kinds, businessDatabaseUrls: resolveBusinessDatabaseUrls(parsed, opts.config) } : undefined;
      const logger = createLogger(process.env['LOG_LEVEL'] === 'debug' ? 'debug' : 'info');
      const server = await serveConsole({
        databaseUrl: opts.databaseUrl,
        config,
        port: opts.port,
        host: opts.host,
        basePath: opts.basePath ?? '',
        readOnly: Boolean(opts.readOnly),
        allowUnauthenticated: Boolean(opts.allowUnauthenticated),
        lagSlaSeconds: lagSlaMs / 1000,
        logger,
        // Migrated past what this version runs: stop serving and exit 3.
        onIncompatibleSchema: () => void server.close().finally(() => process.exit(EXIT.unavailable)),
      });
      await new Promise<void>((resolve) => {
        const stop = () => {
          logger.info('stopping the console');
          void server.close().then(resolve);
        };
        process.once('SIGTERM', stop);
        process.once('SIGINT', stop);
      });
    });
}
