// The process-wide sections of the configuration: coordinator, worker, alerts, the HTTP API and
// retention. Part of the one schema in schema.ts; every default is written beside its field.
import { z } from 'zod';

export const coordinatorSchema = z.strictObject({
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

export const workerSchema = z.strictObject({
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

export const alertsSchema = z.strictObject({
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

export const apiSchema = z.strictObject({
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

export const retentionSchema = z.strictObject({
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
