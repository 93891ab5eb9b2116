// Typed, validated configuration: one schema, one error style. The input type (what a file may
// say) and the resolved type (what the code reads) both come from the zod schema below (its parts:
// kinds.ts, sections.ts; its cross-field checks: checks.ts); every default is written beside its
// field. parseConfig validates an object; load.ts reads files and the environment.
import { z } from 'zod';
import { redisSchema, type RedisConnectionConfig } from '../redis-config.js';
import { checkBusinessDatabases, crossFieldChecks } from './checks.js';
import { breakerSchema, businessDatabaseSchema, KIND_NAME, kindSchema, type routeSchema } from './kinds.js';
import { alertsSchema, apiSchema, coordinatorSchema, retentionSchema, workerSchema } from './sections.js';

export const configSchema = z
  .strictObject({
    /** PostgreSQL URL; DATABASE_URL wins over the file. */
    databaseUrl: z.string().min(1).optional(),
    /** Redis URL; REDIS_URL wins over the file. */
    redisUrl: z.string().min(1).optional(),
    /** Redis Cluster or Sentinel instead of one node (redisUrl). */
    redis: redisSchema.optional(),
    /** Prefix of every Redis key, so several centers (or tests) share one Redis. No braces: the
     *  keys' hash tags are the center's own (src/transport/keys.ts). */
    redisKeyPrefix: z
      .string()
      .min(1)
      .max(100)
      .regex(/^[^{}]*$/, 'no { or } in the prefix: hash tags are set by the center, one per kind, so kinds spread over cluster masters')
      .default('tc'),
    /** PostgreSQL pool size per process (workers add their concurrency). */
    poolSize: z.number().int().min(1).max(200).default(4),
    /** A PostgreSQL connection of the coordinator or a worker with a statement out and nothing
     *  heard for this long is dropped and the work retried on a new one (a network that went
     *  silent without closing it). Default: worker.leaseMs or the longest kind's timeLimitMs,
     *  whichever is longer, + 5 s (35 s with the defaults). */
    databaseSilenceMs: z.number().int().min(1000).max(3_600_000).optional(),
    kinds: z.record(z.string(), kindSchema).superRefine((kinds, ctx) => {
      for (const name of Object.keys(kinds)) {
        if (!KIND_NAME.test(name)) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: 'kind names are lower-case letters, digits and . _ : - (e.g. order.unpaid), at most 100 characters',
          });
        }
      }
      if (Object.keys(kinds).length === 0) ctx.addIssue({ code: 'custom', message: 'declare at least one kind' });
    }),
    /** Databases the center does not own where SQL (and code) handlers run, by name. */
    businessDatabases: z.record(z.string(), businessDatabaseSchema).default({}),
    /** Circuit breaker and retry of the external path (business databases, HTTP, code handlers). */
    breaker: breakerSchema.default(breakerSchema.parse({})),
    coordinator: coordinatorSchema.default(coordinatorSchema.parse({})),
    worker: workerSchema.default(workerSchema.parse({})),
    alerts: alertsSchema.default(alertsSchema.parse({})),
    retention: retentionSchema.default(retentionSchema.parse({})),
    /** The HTTP API for business services (timeout-center api, run --api): tokens and limits. */
    api: apiSchema.default(apiSchema.parse({})),
    /** Port of /metrics, /healthz, /readyz; 0 picks a free one, omit to serve nothing. */
    httpPort: z.number().int().min(0).max(65535).optional(),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .superRefine((config, ctx) => {
    if (config.redisUrl && (config.redis?.cluster || config.redis?.sentinels)) {
      ctx.addIssue({ code: 'custom', path: ['redisUrl'], message: 'give redisUrl (one node) or redis.cluster / redis.sentinels, not both' });
    }
    crossFieldChecks(config, ctx);
    checkBusinessDatabases(config, ctx);
  });

export type ConfigInput = z.input<typeof configSchema>;
export type Config = z.output<typeof configSchema>;
export type KindConfig = Config['kinds'][string];
export type HandlerConfig = KindConfig['handler'];
export type CoordinatorConfig = Config['coordinator'];
export type WorkerConfig = Config['worker'];
export type AlertsConfig = Config['alerts'];
export type RetentionConfig = Config['retention'];
export type ApiConfig = Config['api'];
export type BreakerConfig = Config['breaker'];
export type RouteConfig = z.output<typeof routeSchema>;

/** Resolved config plus where it came from, so relative paths (code handlers) resolve. */
export interface LoadedConfig extends Config {
  databaseUrl: string;
  /** businessDatabases with each URL resolved (urlEnv read from the environment). */
  businessDatabaseUrls: Record<string, string>;
  /** With `allowUnsetUrls` only: business databases whose urlEnv variable is not set (name ->
   *  variable); they are absent from businessDatabaseUrls. */
  unsetUrls?: Record<string, string>;
  /** The one node's URL in single mode; empty with a cluster or sentinels (see redisConnection). */
  redisUrl: string;
  redisConnection: RedisConnectionConfig;
  /** Directory of the config file (or cwd), for code handler modules. */
  baseDir: string;
  source: string;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    readonly source: string,
    readonly problems: string[],
  ) {
    super(`invalid configuration in ${source}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

/** Validates an object against the schema; errors name the field path, e.g. kinds."order.unpaid".shardSize. */
export function parseConfig(input: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(input);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => {
    const path = issue.path.map((p) => (typeof p === 'string' && !/^[A-Za-z_]\w*$/.test(p) ? JSON.stringify(p) : String(p))).join('.');
    return `${path || '(top level)'}: ${issue.message}`;
  });
  throw new ConfigError(source, problems);
}

/** How long a runtime connection to PostgreSQL may stay silent with a statement out
 *  (databaseSilenceMs, db/silence-watch.ts). */
export function databaseSilenceMs(config: Pick<Config, 'databaseSilenceMs' | 'kinds' | 'worker'>): number {
  // Past every wait the server bounds itself: a handler's statement (timeLimitMs) and a lock held
  // by a stalled session's transaction (idle_in_transaction_session_timeout: max(leaseMs, 10 s)).
  const longest = Math.max(config.worker.leaseMs, ...Object.values(config.kinds).map((k) => k.timeLimitMs));
  return config.databaseSilenceMs ?? Math.max(30_000, longest + 5000);
}
