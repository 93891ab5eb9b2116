// `timeout-center api -c FILE`: the HTTP API for business services (src/api/, docs/api.md) on its
// own, needing the center's database (and its stores' for kinds stored beside their orders), not
// Redis; and `--api <port>` on coordinator / worker / run, which serves the same API from that
// process. Tokens come from the config file (api.tokens, hashed) and TC_API_TOKENS, never from
// the command line, where `ps` shows it.
import { CommanderError, Option, type Command } from 'commander';
import type pg from 'pg';
import type { SettleFn } from '../../api/backend.js';
import type { Settler } from '../../settle/settler.js';
import type { ApiServer } from '../../api/server.js';
import { ApiTokenConfigError, resolveApiTokens, TokenTable } from '../../api/tokens.js';
import { databaseSilenceMs, loadConfig, type LoadedConfig } from '../../config.js';
import { assertMigrated } from '../../db/migrate.js';
import { ProcessRegistry } from '../../release/process-registry.js';
import type { SchemaContractError } from '../../release/schema-contract.js';
import { EXIT } from '../exit-codes.js';
import { createPool } from '../../db/pool.js';
import { createLogger, type Logger } from '../../observability/logger.js';
import { checkPostgres } from '../../db/reachability.js';
import { service, type Service } from '../../service.js';
import { storeLayout } from '../../stores/layout.js';

export const DEFAULT_API_PORT = 8081;

function parsePort(value: string, flag: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n > 65535) throw new CommanderError(2, 'tc.input', `${flag} must be a port 0..65535, got "${value}"`);
  return n;
}

export interface ServeApiInput {
  config: LoadedConfig;
  port: number;
  host: string;
  allowUnauthenticated: boolean;
  logger: Logger;
  /** Settle-on-read; the product's settle() (src/settle/) unless a caller gives another. */
  settle?: SettleFn | undefined;
  /** The `api` command: the process in timeout_center.processes, and what to do when the schema
   *  changes under it to one this version may not run on. (With --api, the runtime registers.) */
  onIncompatibleSchema?: (err: SchemaContractError) => void;
}

/** The API's settle: the Settler (src/settle/settler.ts) on the database that holds the timeout
 *  (the backend hands it the center's or the store's pool): timeout_center.settle there for a
 *  handler that runs in it, a one-row shard through the workers' external executor for one that
 *  runs elsewhere (business database, HTTP, code with a module). */
function settleWith(settler: Settler): SettleFn {
  return async (db, kind, bizId) => {
    const r = await settler.settleIn(db, kind, bizId);
    return { outcome: r.outcome, detail: r.detail, state: r.state, result: r.result, shardId: r.shardId };
  };
}

/** Opens the API's pools (the center's, each store's) and serves; close() stops them. */
export async function serveApi(input: ServeApiInput): Promise<ApiServer> {
  const { config, logger } = input;
  let tokens;
  try {
    tokens = new TokenTable(resolveApiTokens(config.api));
  } catch (err) {
    if (err instanceof ApiTokenConfigError) throw new CommanderError(2, 'tc.api', err.message);
    throw err;
  }
  // Loaded here, not at the top: the other verbs start without the API's server modules.
  const [{ ApiBackend }, { Settler }, { ApiConfigError, startApi }] = await Promise.all([
    import('../../api/backend.js'),
    import('../../settle/settler.js'),
    import('../../api/server.js'),
  ]);
  const pools: pg.Pool[] = [];
  const open = (url: string) => {
    // Silence bound as the runtime's: a request never waits on a connection that went silent.
    const pool = createPool({
      connectionString: url,
      max: config.poolSize + 4,
      applicationName: 'timeout-center api',
      logger,
      silentAfterMs: databaseSilenceMs(config),
    });
    pools.push(pool);
    return pool;
  };
  let settler: Settler | undefined;
  let registry: ProcessRegistry | undefined;
  const closePools = async () => {
    await registry?.stop().catch(() => undefined);
    await settler?.close().catch(() => undefined);
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
  };
  try {
    const center = open(config.databaseUrl);
    await checkPostgres(center, config.databaseUrl);
    await assertMigrated(center);
    if (input.onIncompatibleSchema) {
      registry = new ProcessRegistry({ pool: center, role: 'api', logger, onIncompatible: input.onIncompatibleSchema });
      await registry.start();
    }
    const stores: Record<string, pg.Pool> = {};
    for (const store of storeLayout(config.kinds).keys()) {
      const url = config.businessDatabaseUrls[store];
      if (url) stores[store] = open(url);
    }
    if (!input.settle) settler = new Settler({ config, pool: center, stores, logger: logger.child({ component: 'settle' }) });
    const backend = new ApiBackend({ center, stores, kinds: config.kinds, settle: input.settle ?? settleWith(settler!) });
    const server = await startApi({
      backend,
      tokens,
      logger,
      host: input.host,
      port: input.port,
      allowUnauthenticated: input.allowUnauthenticated,
      bodyLimitBytes: config.api.bodyLimitBytes,
      requestTimeoutMs: config.api.requestTimeoutMs,
    });
    return {
      ...server,
      close: async () => {
        await server.close();
        await closePools();
      },
    };
  } catch (err) {
    await closePools();
    if (err instanceof ApiConfigError) throw new CommanderError(2, 'tc.api', err.message);
    throw err;
  }
}

/** --api and its companions on coordinator / worker / run. */
export function addApiOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--api <port>', 'also serve the HTTP API (/v1) on this port (tokens: api.tokens or TC_API_TOKENS)').argParser((v) => parsePort(v, '--api')),
    )
    .addOption(new Option('--api-host <host>', 'address the API listens on (non-loopback needs tokens)').default('127.0.0.1'));
}

export interface ServeApiOpts {
  api?: number;
  apiHost: string;
}

/** The API of a coordinator / worker / run process when --api was given: one more service. */
export function apiService(opts: ServeApiOpts, config: LoadedConfig, logger: Logger, settle?: SettleFn): Service | undefined {
  if (opts.api === undefined) return undefined;
  const port = opts.api;
  let server: ApiServer | undefined;
  return service(
    'api',
    async () => {
      server = await serveApi({ config, port, host: opts.apiHost, allowUnauthenticated: false, logger, settle });
    },
    async () => {
      await server?.close();
      server = undefined;
    },
  );
}

export function registerApi(program: Command): void {
  program
    .command('api')
    .description('serve the HTTP API for business services: schedule (one or a batch), cancel, reschedule, get, settle; OpenAPI at /v1/openapi.json')
    .addOption(new Option('-p, --port <port>', 'port to serve on (0 = any free port)').argParser((v) => parsePort(v, '--port')).default(DEFAULT_API_PORT))
    .addOption(new Option('--host <host>', 'address to listen on; a non-loopback one needs tokens').default('127.0.0.1'))
    .addOption(new Option('--allow-unauthenticated', 'serve without tokens on a non-loopback address (only when a proxy in front authenticates)'))
    .action(async (opts: { config?: string; port: number; host: string; allowUnauthenticated?: boolean }) => {
      const config = loadConfig({ path: opts.config, needsRedis: false });
      const logger = createLogger(config.logLevel);
      // OpenTelemetry when the OTEL_* variables configure it, as in run/coordinator/worker (there
      // it is the runtime's first service): each request's span is exported.
      const { TracingService } = await import('../../observability/tracing.js');
      const tracing = new TracingService(logger);
      await tracing.start();
      let server: ApiServer;
      try {
        server = await serveApi({
          config,
          port: opts.port,
          host: opts.host,
          allowUnauthenticated: Boolean(opts.allowUnauthenticated),
          logger,
          // Migrated past what this version runs: stop serving and exit 3.
          onIncompatibleSchema: () => void server.close().finally(() => process.exit(EXIT.unavailable)),
        });
      } catch (err) {
        await tracing.stop();
        throw err;
      }
      await new Promise<void>((resolve) => {
        const stop = () => {
          logger.info('stopping the API');
          void server
            .close()
            .then(() => tracing.stop())
            .then(resolve);
        };
        process.once('SIGTERM', stop);
        process.once('SIGINT', stop);
      });
    });
}
