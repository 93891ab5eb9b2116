// The systems and settings compared. Each peer is run in the settings listed here; the best one
// per system (highest burst drain) is the one the steady workload and the targets use.
// The "settings tried" table in docs/benchmarks.md is generated from this list.
import { TC_DEFAULTS, type Variant } from './systems.ts';

/** timeout-center's best settings found on the reference box (2 cores, one shared PostgreSQL):
 *  see `npm run bench -- --tune` and the tuning table in docs/benchmarks.md. */
export const TC_BEST = { ...TC_DEFAULTS, shardSize: 20_000, concurrency: 2, databaseConcurrency: 2, claimChunk: 100_000, maxInFlightShards: 4 };

export const VARIANTS: Variant[] = [
  { id: 'tc-default', system: 'timeout-center', label: 'timeout-center (default)', settings: { ...TC_DEFAULTS } },
  // The defaults before worker.databaseConcurrency: four same-database shards at once.
  {
    id: 'tc-db4',
    system: 'timeout-center',
    label: 'timeout-center (defaults, 4 database shards at once)',
    settings: { ...TC_DEFAULTS, databaseConcurrency: 4 },
  },
  { id: 'tc-best', system: 'timeout-center', label: 'timeout-center (hand-tuned: shard 20,000 × 2, 4 in flight)', settings: { ...TC_BEST } },
  // The physical reference: the limit statement on the minimal schema (bench/lib/limit.ts), two
  // connections, both spellings, several k. The best of these is the "× minimal limit" reference.
  { id: 'min-1000-array', system: 'minimal-sql', label: 'minimal limit k=1000, ARRAY', settings: { connections: 2, limit: 1000, form: 'array' } },
  { id: 'min-5000-array', system: 'minimal-sql', label: 'minimal limit k=5000, ARRAY', settings: { connections: 2, limit: 5000, form: 'array' } },
  { id: 'min-5000-in', system: 'minimal-sql', label: 'minimal limit k=5000, IN', settings: { connections: 2, limit: 5000, form: 'in' } },
  { id: 'min-20000-array', system: 'minimal-sql', label: 'minimal limit k=20000, ARRAY', settings: { connections: 2, limit: 20_000, form: 'array' } },
  // The same statement on our schema (timeout_center.timeouts): the difference is what the schema costs.
  { id: 'sql-5000-array', system: 'pure-sql', label: 'limit on our schema k=5000, ARRAY', settings: { connections: 2, limit: 5000, form: 'array' } },
  { id: 'sql-20000-array', system: 'pure-sql', label: 'limit on our schema k=20000, ARRAY', settings: { connections: 2, limit: 20_000, form: 'array' } },
  {
    id: 'pgboss-batch-500',
    system: 'pg-boss-batch',
    label: 'pg-boss batch 500×2',
    settings: { batchSize: 500, localConcurrency: 2, pollingIntervalSeconds: 0.5, transactional: true, poolMax: 6 },
  },
  {
    id: 'pgboss-batch-1000',
    system: 'pg-boss-batch',
    label: 'pg-boss batch 1000×4',
    settings: { batchSize: 1000, localConcurrency: 4, pollingIntervalSeconds: 0.5, transactional: true, poolMax: 8 },
  },
  // pg-boss 12 waits pollingIntervalSeconds (>= 0.5) between fetches of a worker unless the last
  // batch came back full (burstWhenBatchFull, ignored for batchSize 1): with batchSize 1 each
  // worker runs at most 2 jobs/s (the smoke run measured 32/s for localConcurrency 16). Per-job
  // handling is therefore run with batched fetch and completion, one UPDATE per job.
  {
    id: 'pgboss-job-100',
    system: 'pg-boss-job',
    label: 'pg-boss per-job, fetch 100×4',
    settings: { batchSize: 100, localConcurrency: 4, pollingIntervalSeconds: 0.5, transactional: false, perJob: true, perJobConnections: 8, poolMax: 6 },
  },
  {
    id: 'pgboss-job-500',
    system: 'pg-boss-job',
    label: 'pg-boss per-job, fetch 500×2',
    settings: { batchSize: 500, localConcurrency: 2, pollingIntervalSeconds: 0.5, transactional: false, perJob: true, perJobConnections: 16, poolMax: 4 },
  },
  {
    id: 'graphile-default',
    system: 'graphile-worker',
    label: 'graphile-worker ×10',
    settings: { concurrency: 10, maxPoolSize: 12, pollInterval: 2000, localQueueSize: -1, completeJobBatchDelay: -1 },
  },
  {
    id: 'graphile-batched',
    system: 'graphile-worker',
    label: 'graphile-worker ×24 localQueue',
    settings: { concurrency: 24, maxPoolSize: 26, pollInterval: 200, localQueueSize: 500, completeJobBatchDelay: 0 },
  },
  { id: 'bullmq-50', system: 'bullmq', label: 'BullMQ ×50', settings: { concurrency: 50, poolMax: 10, workers: 1 } },
  { id: 'bullmq-2x100', system: 'bullmq', label: 'BullMQ 2×100', settings: { concurrency: 100, poolMax: 10, workers: 2 } },
];

/** timeout-center settings tried by --tune (burst only). */
export const TC_TUNE: Variant[] = [
  { id: 'tune-default', settings: { ...TC_DEFAULTS } },
  { id: 'tune-s5000-c2', settings: { ...TC_DEFAULTS, shardSize: 5000, concurrency: 2, claimChunk: 50_000, maxInFlightShards: 8 } },
  { id: 'tune-s5000-c3', settings: { ...TC_DEFAULTS, shardSize: 5000, concurrency: 3, claimChunk: 50_000, maxInFlightShards: 8 } },
  { id: 'tune-s4000-c3', settings: { ...TC_DEFAULTS, shardSize: 4000, concurrency: 3, claimChunk: 50_000, maxInFlightShards: 10 } },
  { id: 'tune-s2500-c4', settings: { ...TC_DEFAULTS, shardSize: 2500, concurrency: 4, claimChunk: 50_000, maxInFlightShards: 16 } },
  { id: 'tune-s10000-c2', settings: { ...TC_DEFAULTS, shardSize: 10_000, concurrency: 2, claimChunk: 50_000, maxInFlightShards: 5 } },
  { id: 'tune-s20000-c2', settings: { ...TC_DEFAULTS, shardSize: 20_000, concurrency: 2, claimChunk: 100_000, maxInFlightShards: 4 } },
  { id: 'tune-s2000-c2', settings: { ...TC_DEFAULTS, shardSize: 2000, concurrency: 2, maxInFlightShards: 16 } },
  { id: 'tune-s2000-c4', settings: { ...TC_DEFAULTS, shardSize: 2000, concurrency: 4, maxInFlightShards: 16 } },
  { id: 'tune-s10000-c3', settings: { ...TC_DEFAULTS, shardSize: 10_000, concurrency: 3, claimChunk: 100_000, maxInFlightShards: 6 } },
  { id: 'tune-s20000-c3', settings: { ...TC_DEFAULTS, shardSize: 20_000, concurrency: 3, claimChunk: 100_000, maxInFlightShards: 5 } },
  { id: 'tune-s10000-c4', settings: { ...TC_DEFAULTS, shardSize: 10_000, concurrency: 4, claimChunk: 100_000, maxInFlightShards: 8 } },
  { id: 'tune-2w-s5000-c2', settings: { ...TC_DEFAULTS, workers: 2, concurrency: 2, shardSize: 5000, claimChunk: 50_000, maxInFlightShards: 8 } },
  // A tuned concurrency is the number of shards at once: same-database shards included.
].map((v) => ({
  ...v,
  settings: v.id === 'tune-default' ? v.settings : { ...v.settings, databaseConcurrency: v.settings.concurrency },
  system: 'timeout-center' as const,
  label: v.id,
}));

/** The smoke run: timeout-center, the minimal limit and one variant of each peer, small (the
 *  limit on our schema and pg-boss per job are left to full runs, to keep CI under a minute). */
export const SMOKE_IDS = ['tc-default', 'min-1000-array', 'pgboss-batch-500', 'graphile-batched', 'bullmq-50'];
