// Typed, validated configuration: one schema, one error style. The input type (what a file may
// say) and the resolved type (what the code reads) both come from the zod schema below; every
// default is written beside its field.
import { readFileSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import cron from 'node-cron';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { parseConnectionString } from './db/connection-string.js';
import { redisSchema, resolveRedis, type RedisConnectionConfig } from './redis-config.js';

export type { RedisConnectionConfig, RedisNode } from './redis-config.js';

const KIND_NAME = /^[a-z0-9][a-z0-9_.:-]{0,99}$/;
/** Business database names: they appear in shards.target, metrics labels and SQL. */
export const BUSINESS_DATABASE_NAME = /^[a-z][a-z0-9_]{0,62}$/;

const databaseList = z.array(z.string().min(1)).min(1).max(1024);

/** How a kind's biz_ids map to business databases. modulo: integer biz_id (up to 18 digits),
 *  database number biz_id mod n (0-based, non-negative). hash: any text biz_id, database number
 *  hashtextextended(biz_id, 0) mod n (non-negative; the hash PostgreSQL's hash partitioning uses,
 *  so stable across versions). range: integer biz_id, from <= id < to. An id the rule cannot
 *  place fails at once with an error naming the rule (timeout_center.route_target, sql/0005). */
const routeSchema = z.discriminatedUnion('by', [
  z.strictObject({ by: z.literal('modulo'), databases: databaseList }),
  z.strictObject({ by: z.literal('hash'), databases: databaseList }),
  z.strictObject({
    by: z.literal('range'),
    ranges: z
      .array(z.strictObject({ from: z.number().int(), to: z.number().int(), database: z.string().min(1) }))
      .min(1)
      .max(1024),
  }),
]);

const sqlHandler = z.strictObject({
  type: z.literal('sql'),
  /** Run in this business database (a name under businessDatabases) instead of the center's own:
   *  the external path (claim, apply there with a marker, record). Leave out both database and
   *  route for the same-database path. */
  database: z.string().min(1).optional(),
  /** Run in one of several business databases, chosen per biz_id (see routeSchema). */
  route: routeSchema.optional(),
  /** One statement. $1 is the array of biz_ids (text[]), $2 the payloads (jsonb[]). Its first
   *  result column is the ids it changed (an UPDATE needs RETURNING): ids not returned count as
   *  skipped. A SELECT of your own function works too. */
  sql: z
    .string()
    .min(1)
    .refine((s) => !/^\s*(update|delete|insert)\b/i.test(s) || /\breturning\b/i.test(s), {
      message: 'the statement must end with RETURNING <id column>: ids it does not return count as skipped',
    }),
});

const httpHandler = z.strictObject({
  type: z.literal('http'),
  /** One POST per shard: {"kind", "shardId", "items": [{"bizId", "payload"}]}. The reply is
   *  {"applied": [bizId...], "failed": [{"bizId", "error"}]}; ids in neither count as skipped. */
  url: z.url(),
  headers: z.record(z.string(), z.string()).default({}),
});

const codeHandler = z.strictObject({
  type: z.literal('code'),
  /** A module (path relative to the config file) whose export is a ShardHandler function. Kinds
   *  whose handler is registered programmatically (Worker.registerHandler) may leave this out. */
  module: z.string().min(1).optional(),
  export: z.string().min(1).default('default'),
  /** ctx.client is a connection to this business database, in a transaction of its own that
   *  also writes the marker; default: the center's database. */
  database: z.string().min(1).optional(),
});

const businessDatabaseSchema = z
  .strictObject({
    /** PostgreSQL URL of the business database. */
    url: z.string().min(1).optional(),
    /** Name of an environment variable holding the URL (keeps passwords out of the file). */
    urlEnv: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name, e.g. ORDERS_0_URL')
      .optional(),
    /** Connections per worker process to this database. */
    poolSize: z.number().int().min(1).max(200).default(4),
    /** At most this many timeouts per second applied against this database, over all kinds whose
     *  shards target it, fleet-wide (docs/operations.md "Flow control"). A default: a run-time
     *  change (`timeout-center limit --database <name> --rate N|none`, SQL, the console) wins
     *  until `limit --database <name> --reset`. Default: no limit. */
    rateLimit: z
      .number()
      .positive('a rate limit is timeouts per second above 0; leave it out for no limit')
      .max(10_000_000, 'at most 10000000 timeouts per second')
      .optional(),
  })
  .refine((d) => (d.url === undefined) !== (d.urlEnv === undefined), { message: 'give exactly one of url or urlEnv' });

const breakerSchema = z.strictObject({
  /** Batch-level failures in a row (per kind and target, per worker) that open the breaker. */
  consecutiveFailures: z.number().int().min(1).max(1000).default(3),
  /** How long an open breaker refuses calls before one trial call (half-open). */
  halfOpenAfterMs: z.number().int().min(100).max(3_600_000).default(5000),
  /** Longest wait before a batch that failed as a whole is tried again. */
  maxRetryDelayMs: z.number().int().min(100).max(3_600_000).default(30_000),
});

const kindSchema = z.strictObject({
  description: z.string().optional(),
  /** Timeouts per shard: one handler statement per shard. */
  shardSize: z.number().int().min(1).max(100_000).default(500),
  /** Attempts per timeout before it becomes `failed` (also the cap for a shard re-run after its
   *  worker died). */
  maxAttempts: z.number().int().min(1).max(1000).default(5),
  /** Backoff before retrying a failed timeout: backoffMs * 2^(attempt-1), capped at 10 min. */
  backoffMs: z.number().int().min(0).max(3_600_000).default(1000),
  /** Time limit of one handler call (statement_timeout for SQL handlers). */
  timeLimitMs: z.number().int().min(10).max(600_000).default(10_000),
  handler: z.discriminatedUnion('type', [sqlHandler, httpHandler, codeHandler]),
  /** Where the kind's timeouts live. center (default): the center's database. beside: in the
   *  business database the SQL handler's `route` (or `database`) picks for the biz_id, beside the
   *  orders they close: each such database is a store with the timeout_center schema (`migrate`
   *  installs it), led on its own, where claim and handler are one statement (docs/scale.md). */
  store: z.enum(['center', 'beside']).default('center'),
  // Flow control (docs/operations.md "Flow control"): defaults, enforced fleet-wide. A run-time
  // change (SQL, `timeout-center pause|resume|limit`, the console) wins over these until the kind
  // is reset to its config (`timeout-center limit <kind> --reset`).
  /** true: nothing of this kind starts; its due timeouts wait in the table. */
  paused: z.boolean().default(false),
  /** At most this many shards of the kind queued or running at once, fleet-wide. Default: no cap. */
  maxRunningShards: z.number().int().min(1).max(100_000).optional(),
  /** At most this many timeouts per second, fleet-wide (measured at commit). Default: no limit. */
  rateLimit: z.number().positive().max(10_000_000).optional(),
});

const coordinatorSchema = z.strictObject({
  /** node-cron expression of the safety-net tick (six fields: seconds first). The coordinator also
   *  wakes early when it knows the next due time. */
  schedule: z.string().default('* * * * * *'),
  /** Never tick more often than this, even when timeouts are due back to back. Under a continuous
   *  stream of due times a row waits about half of it before it is planned; a tick with nothing new
   *  costs two index probes (next_due.sql), and a plan one statement (docs/benchmarks.md). */
  minTickIntervalMs: z.number().int().min(10).max(60_000).default(20),
  /** How far past the shards in flight the map counts due timeouts of a kind in one go. What it
   *  counts but has no room for yet is remembered (up to 1 s), so a flood is counted once per
   *  claimChunk rows, not once per shard. */
  claimChunk: z.number().int().min(1).max(1_000_000).default(50_000),
  /** Write no new shards while this many are queued or running (backpressure). */
  maxInFlightShards: z.number().int().min(1).max(100_000).default(64),
  /** Leadership lock lifetime in Redis; renewed every third of it. */
  lockTtlMs: z.number().int().min(500).max(600_000).default(10_000),
  /** A queued shard not taken by a worker within this long is published again. */
  republishAfterMs: z.number().int().min(100).max(3_600_000).default(30_000),
  /** How often the backlog lag is measured for the SLA alert and metrics. */
  lagCheckIntervalMs: z.number().int().min(100).default(5_000),
  /** How often the leader reads what holds the vacuum horizon of its databases (the center's and
   *  every business database's; a store's leader its store's): tc_vacuum_horizon_* metrics and the
   *  vacuum_horizon alert (docs/vacuum-horizon.md). */
  horizonCheckIntervalMs: z.number().int().min(1000).max(3_600_000).default(15_000),
});

const workerSchema = z.strictObject({
  /** Shards run at once by one worker process (each holds one PostgreSQL connection). */
  concurrency: z.number().int().min(1).max(256).default(4),
  /** Of those, shards whose handler runs in the center's own PostgreSQL (a SQL handler without a
   *  business database) run at most this many at once: they spend that server's CPU, and more at
   *  once only share its cores and walk past each other's row locks (bench/analysis.md: on 2
   *  cores, 2 at a time drained a flood 1.2x faster than 4). Code, HTTP and business-database
   *  shards, which wait on other services, use the rest of `concurrency`. */
  databaseConcurrency: z.number().int().min(1).max(256).default(2),
  /** Shard deliveries read ahead of free slots, so the next shard starts as soon as one ends.
   *  A read-ahead delivery is not leased: if this worker dies it is taken over (XAUTOCLAIM). */
  prefetch: z.number().int().min(0).max(256).default(2),
  /** Lease on a shard; a shard whose lease ran out (worker died) is reclaimed. Must exceed the
   *  kinds' time limits. */
  leaseMs: z.number().int().min(1000).max(3_600_000).default(30_000),
  /** A worker that wrote no heartbeat for this long (on the database clock), or stopped, is gone:
   *  the leader ends the leases it held and republishes the deliveries it had read, so its shards
   *  run again within this bound plus one reap (1 s), whatever leaseMs is; the map stops counting
   *  them as covering due rows at once. Workers write their heartbeat every third of it. A live
   *  worker stalled longer than this (a pause, a stop-the-world) only loses its leases: its late
   *  writes are refused (docs/reliability.md). The coordinators and the workers must agree on it. */
  goneAfterMs: z.number().int().min(1000).max(600_000).default(3000),
  /** XREADGROUP BLOCK time. */
  blockMs: z.number().int().min(10).max(60_000).default(1000),
  /** Only run these kinds (default: all kinds of the config). */
  kinds: z.array(z.string()).optional(),
  /** Worker id (Redis consumer name); default host-pid. */
  id: z.string().min(1).max(200).optional(),
  /** Stop timeout after the first SIGTERM: in-flight shards finish within it or are released. */
  drainTimeoutMs: z.number().int().min(0).max(600_000).default(30_000),
});

const alertsSchema = z.strictObject({
  /** JSON POST for each alert. */
  webhookUrl: z.url().optional(),
  webhookTimeoutMs: z.number().int().min(100).max(60_000).default(5000),
  /** Alert when this many reduced scans in a row had failures. */
  consecutiveFailedScans: z.number().int().min(1).default(3),
  /** Alert when the oldest due timeout is later than this. */
  lagSlaMs: z.number().int().min(1).default(60_000),
  /** Do not repeat the same lag alert more often than this. */
  lagAlertEveryMs: z.number().int().min(1000).default(60_000),
  /** Alert (store_unreachable) when a store's database has not answered for this long: a few
   *  seconds, so an operator hears of a store that stopped before its timeouts are late. */
  storeDownMs: z.number().int().min(1000).default(5000),
  /** Warn (status, console, the vacuum_horizon alert) when a session, a prepared transaction or
   *  anything else whose start PostgreSQL knows has held back VACUUM for longer than this: rows
   *  deleted since stay on disk and the queue slows (docs/vacuum-horizon.md). Default 5 minutes: a
   *  nightly pg_dump of a large database warns. */
  vacuumHorizonMs: z.number().int().min(1000).default(300_000),
  /** The same for a replication slot or a standby's feedback, whose start is unknown: their age in
   *  transactions (age(xmin)). Default 10 million. */
  vacuumHorizonXids: z.number().int().min(1000).default(10_000_000),
});

const DAY_MS = 86_400_000;

/** A bearer token of the HTTP API (src/api/): stored as its SHA-256 (hex), never in clear. */
const apiTokenSchema = z.strictObject({
  /** Who holds it; logs and errors name the token by this, never by its secret. */
  name: z.string().min(1).max(100),
  /** SHA-256 of the token, hex (`printf %s "$TOKEN" | sha256sum`). */
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'sha256 must be 64 lower-case hex digits (printf %s "$TOKEN" | sha256sum)'),
  /** Kinds the token may act on; ["*"]: every kind. */
  kinds: z.array(z.string().min(1)).min(1),
  /** Verbs it may use (schedule, cancel, reschedule, get, settle); ["*"]: all of them. */
  verbs: z.array(z.enum(['schedule', 'cancel', 'reschedule', 'get', 'settle', '*'])).min(1),
});

const apiSchema = z.strictObject({
  /** Tokens (more may come from TC_API_TOKENS, see docs/api.md). */
  tokens: z.array(apiTokenSchema).default([]),
  /** Largest request body, bytes. */
  bodyLimitBytes: z
    .number()
    .int()
    .min(1024)
    .max(64 * 1024 * 1024)
    .default(4 * 1024 * 1024),
  /** A request whose body has not arrived this many ms after its headers is answered 408 (and Node cuts
   *  headers that never end at this + 1 s). */
  requestTimeoutMs: z.number().int().min(100).max(600_000).default(10_000),
});

const retentionSchema = z.strictObject({
  /** The leading coordinator purges every intervalMs. false: nothing purges on its own (run
   *  `timeout-center purge` from cron instead). */
  enabled: z.boolean().default(true),
  /** Done and cancelled timeouts whose finished_at is older than this are deleted. Failed
   *  timeouts are never purged: operators retry them. Default 7 days. */
  doneAfterMs: z
    .number()
    .int()
    .min(0)
    .default(7 * DAY_MS),
  /** Reduced scans (and their shards) older than this are deleted, except scans that still have
   *  failed timeouts. Default 7 days. Stopped workers not seen for this long are forgotten too. */
  scansAfterMs: z
    .number()
    .int()
    .min(0)
    .default(7 * DAY_MS),
  /** Timeouts deleted per statement: each batch is one short DELETE, so no lock is held long. */
  batchSize: z.number().int().min(1).max(100_000).default(5000),
  /** Scans deleted per statement (each takes its shards with it). */
  scanBatchSize: z.number().int().min(1).max(10_000).default(100),
  /** How often the leader purges. Each run deletes batch after batch until nothing old is left. */
  intervalMs: z.number().int().min(100).max(DAY_MS).default(60_000),
});

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

/** Checks that span fields, in the schema itself so that every entry point (parseConfig,
 *  loadConfig, command-line flags merged in before parsing) refuses the same configs. */
function crossFieldChecks(
  config: {
    kinds: Record<string, { timeLimitMs: number }>;
    databaseSilenceMs?: number | undefined;
    coordinator: { schedule: string };
    worker: { kinds?: string[] | undefined; leaseMs: number };
  },
  ctx: z.RefinementCtx,
): void {
  const declared = Object.keys(config.kinds);
  const unknown = (config.worker.kinds ?? []).filter((k) => !declared.includes(k));
  if (unknown.length > 0) {
    ctx.addIssue({ code: 'custom', path: ['worker', 'kinds'], message: `unknown kind(s) ${unknown.join(', ')}; declared kinds: ${declared.join(', ')}` });
  }
  for (const [name, kind] of Object.entries(config.kinds)) {
    if (kind.timeLimitMs >= config.worker.leaseMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['kinds', name, 'timeLimitMs'],
        message: `${kind.timeLimitMs} ms must be below worker.leaseMs (${config.worker.leaseMs} ms), or a slow shard would be reclaimed while it runs`,
      });
    }
  }
  const longest = Math.max(0, ...Object.values(config.kinds).map((k) => k.timeLimitMs));
  if (config.databaseSilenceMs !== undefined && config.databaseSilenceMs <= longest) {
    ctx.addIssue({
      code: 'custom',
      path: ['databaseSilenceMs'],
      message: `${config.databaseSilenceMs} ms must be above the longest kind's timeLimitMs (${longest} ms): a handler's statement may be silent that long`,
    });
  }
  if (!cron.validate(config.coordinator.schedule)) {
    ctx.addIssue({
      code: 'custom',
      path: ['coordinator', 'schedule'],
      message: `"${config.coordinator.schedule}" is not a valid node-cron expression (six fields, seconds first, e.g. "* * * * * *")`,
    });
  }
}

/** Cross-field checks of business databases and routes: names exist, ranges are sound. */
function checkBusinessDatabases(
  config: {
    businessDatabases: Record<string, unknown>;
    kinds: Record<string, { handler: z.output<typeof sqlHandler> | z.output<typeof httpHandler> | z.output<typeof codeHandler>; store?: 'center' | 'beside' }>;
  },
  ctx: z.RefinementCtx,
): void {
  const declared = Object.keys(config.businessDatabases);
  for (const name of declared) {
    if (!BUSINESS_DATABASE_NAME.test(name)) {
      ctx.addIssue({
        code: 'custom',
        path: ['businessDatabases', name],
        message: 'database names are lower-case letters, digits and _, starting with a letter (e.g. orders_0)',
      });
    } else if (name === 'center') {
      // Operators, logs and metrics call the center's own database "center" (stores/layout.ts).
      ctx.addIssue({ code: 'custom', path: ['businessDatabases', name], message: '"center" names the center\'s own database: pick another name' });
    }
  }
  const known = (path: (string | number)[], name: string) => {
    if (!(name in config.businessDatabases)) {
      ctx.addIssue({
        code: 'custom',
        path,
        message: `unknown business database "${name}"; declared: ${declared.length ? declared.join(', ') : 'none (add it under businessDatabases)'}`,
      });
    }
  };
  for (const [kind, { handler, store }] of Object.entries(config.kinds ?? {})) {
    const base = ['kinds', kind, 'handler'];
    if (store === 'beside' && handler.type !== 'sql') {
      ctx.addIssue({
        code: 'custom',
        path: ['kinds', kind, 'store'],
        message: 'store: beside takes a SQL handler with a route or a database (its statement runs in the store)',
      });
      continue;
    }
    if (handler.type === 'code' && handler.database) known([...base, 'database'], handler.database);
    if (handler.type !== 'sql') continue;
    if (handler.database && handler.route) ctx.addIssue({ code: 'custom', path: base, message: 'give database or route, not both' });
    if (store === 'beside' && !handler.database && !handler.route) {
      ctx.addIssue({
        code: 'custom',
        path: ['kinds', kind, 'store'],
        message: 'store: beside keeps the timeouts in the business database the handler picks: give the handler a route or a database',
      });
    }
    if (handler.database) known([...base, 'database'], handler.database);
    const route = handler.route;
    if (!route) continue;
    if (route.by === 'range') {
      route.ranges.forEach((r, i) => {
        known([...base, 'route', 'ranges', i, 'database'], r.database);
        if (r.from >= r.to)
          ctx.addIssue({
            code: 'custom',
            path: [...base, 'route', 'ranges', i],
            message: `from (${r.from}) must be below to (${r.to}): a range is from <= biz_id < to`,
          });
      });
      const sorted = route.ranges.map((r, i) => ({ ...r, i })).sort((a, b) => a.from - b.from);
      for (let j = 1; j < sorted.length; j += 1) {
        const prev = sorted[j - 1]!;
        const cur = sorted[j]!;
        if (cur.from < prev.to) {
          ctx.addIssue({
            code: 'custom',
            path: [...base, 'route', 'ranges', cur.i],
            message: `overlaps range ${prev.i} ([${prev.from}, ${prev.to}) -> ${prev.database}): every biz_id must map to one database`,
          });
        }
      }
    } else {
      route.databases.forEach((d, i) => known([...base, 'route', 'databases', i], d));
    }
  }
}

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

/** How long a runtime connection to PostgreSQL may stay silent with a statement out
 *  (databaseSilenceMs, db/silence-watch.ts). */
export function databaseSilenceMs(config: Pick<Config, 'databaseSilenceMs' | 'kinds' | 'worker'>): number {
  // Past every wait the server bounds itself: a handler's statement (timeLimitMs) and a lock held
  // by a stalled session's transaction (idle_in_transaction_session_timeout: max(leaseMs, 10 s)).
  const longest = Math.max(config.worker.leaseMs, ...Object.values(config.kinds).map((k) => k.timeLimitMs));
  return config.databaseSilenceMs ?? Math.max(30_000, longest + 5000);
}
