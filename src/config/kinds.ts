// The configuration of kinds: a kind's shards, attempts and time limit, its handler (SQL, HTTP or
// code), where its biz_ids route among business databases, and the business databases and the
// circuit breaker of the external path. Part of the one schema in schema.ts.
import { z } from 'zod';

export const KIND_NAME = /^[a-z0-9][a-z0-9_.:-]{0,99}$/;
/** Business database names: they appear in shards.target, metrics labels and SQL. */
export const BUSINESS_DATABASE_NAME = /^[a-z][a-z0-9_]{0,62}$/;

const databaseList = z.array(z.string().min(1)).min(1).max(1024);

/** How a kind's biz_ids map to business databases. modulo: integer biz_id (up to 18 digits),
 *  database number biz_id mod n (0-based, non-negative). hash: any text biz_id, database number
 *  hashtextextended(biz_id, 0) mod n (non-negative; the hash PostgreSQL's hash partitioning uses,
 *  so stable across versions). range: integer biz_id, from <= id < to. An id the rule cannot
 *  place fails at once with an error naming the rule (timeout_center.route_target, sql/0005). */
export const routeSchema = z.discriminatedUnion('by', [
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

export const sqlHandler = z.strictObject({
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

export const httpHandler = z.strictObject({
  type: z.literal('http'),
  /** One POST per shard: {"kind", "shardId", "items": [{"bizId", "payload"}]}. The reply is
   *  {"applied": [bizId...], "failed": [{"bizId", "error"}]}; ids in neither count as skipped. */
  url: z.url(),
  headers: z.record(z.string(), z.string()).default({}),
});

export const codeHandler = z.strictObject({
  type: z.literal('code'),
  /** A module (path relative to the config file) whose export is a ShardHandler function. Kinds
   *  whose handler is registered programmatically (Worker.registerHandler) may leave this out. */
  module: z.string().min(1).optional(),
  export: z.string().min(1).default('default'),
  /** ctx.client is a connection to this business database, in a transaction of its own that
   *  also writes the marker; default: the center's database. */
  database: z.string().min(1).optional(),
});

export const businessDatabaseSchema = z
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

export const breakerSchema = z.strictObject({
  /** Batch-level failures in a row (per kind and target, per worker) that open the breaker. */
  consecutiveFailures: z.number().int().min(1).max(1000).default(3),
  /** How long an open breaker refuses calls before one trial call (half-open). */
  halfOpenAfterMs: z.number().int().min(100).max(3_600_000).default(5000),
  /** Longest wait before a batch that failed as a whole is tried again. */
  maxRetryDelayMs: z.number().int().min(100).max(3_600_000).default(30_000),
});

export const kindSchema = z.strictObject({
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
