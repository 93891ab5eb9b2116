// Prometheus metrics of one process. Names are stable: the Grafana dashboard in deploy/ reads them.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { BulkHistogram } from './bulk-histogram.js';
import { thisBuild } from '../release/schema-contract.js';

export class Metrics {
  readonly registry = new Registry();

  readonly timeouts = new Counter({
    name: 'tc_timeouts_total',
    help: 'Timeouts finished, by kind and outcome (applied, skipped, failed, retried); failed counts those of abandoned shards too (coordinator)',
    labelNames: ['store', 'kind', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly shards = new Counter({
    name: 'tc_shards_total',
    help: 'Shards finished by workers, by kind and outcome (done, failed, released; held: handed back by flow control; split: a re-run after a worker death handed its rows to two new shards)',
    labelNames: ['store', 'kind', 'outcome'] as const,
    registers: [this.registry],
  });
  /** Observed a shard at a time (observeMany): see bulk-histogram.ts. */
  readonly lateness = new BulkHistogram({
    name: 'tc_lateness_seconds',
    help: 'Lateness at commit: PostgreSQL clock after the commit that applied each timeout minus its due time, by store and kind',
    labelNames: ['store', 'kind'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900],
    registers: [this.registry],
  });
  readonly shardDuration = new Histogram({
    name: 'tc_shard_duration_seconds',
    help: 'Time a worker spent on one shard, lease to commit',
    labelNames: ['store', 'kind'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly scanDuration = new Histogram({
    name: 'tc_scan_duration_seconds',
    help: 'Time from a scan start to its reduce',
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [this.registry],
  });
  readonly scans = new Counter({
    name: 'tc_scans_total',
    help: 'Scans reduced, by whether any timeout failed',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  /** Due timeouts the map planned into new shards (workers then claim the rows). */
  readonly planned = new Counter({
    name: 'tc_planned_total',
    help: 'Due timeouts the coordinator planned into new shards (the sum of their claim limits; workers claim the rows)',
    registers: [this.registry],
  });
  /** Deprecated name of tc_planned_total (same value), kept for one release: "claimed" is what
   *  workers do, not the map. Remove in the next release. */
  readonly plannedDeprecated = new Counter({
    name: 'tc_claimed_total',
    help: 'DEPRECATED, use tc_planned_total (same value); removed in the next release',
    registers: [this.registry],
  });
  readonly backlog = new Gauge({
    name: 'tc_backlog',
    help: 'Timeouts due but not final, by store, kind and state (pending, in_flight)',
    labelNames: ['store', 'kind', 'state'] as const,
    registers: [this.registry],
  });
  readonly oldestLag = new Gauge({
    name: 'tc_backlog_oldest_lag_seconds',
    help: 'How late the oldest due, unfinished timeout is, by store and kind',
    labelNames: ['store', 'kind'] as const,
    registers: [this.registry],
  });
  readonly stranded = new Gauge({
    name: 'tc_timeouts_stranded',
    help: 'Timeouts dispatched to a finished shard, which no run will apply (a bug: docs/operations.md "Stranded timeouts"), by store and kind',
    labelNames: ['store', 'kind'] as const,
    registers: [this.registry],
  });
  readonly shardsInFlight = new Gauge({
    name: 'tc_shards_in_flight',
    help: 'Shards queued or running, as the leader of each store last counted',
    labelNames: ['store'] as const,
    registers: [this.registry],
  });
  readonly leader = new Gauge({
    name: 'tc_leader',
    help: '1 while this coordinator leads the store (center: the center database), else 0',
    labelNames: ['store'] as const,
    registers: [this.registry],
  });
  readonly epoch = new Gauge({
    name: 'tc_leader_epoch',
    help: 'Fencing epoch this coordinator holds in the store (0 when standby)',
    labelNames: ['store'] as const,
    registers: [this.registry],
  });
  readonly storeUp = new Gauge({
    name: 'tc_store_up',
    help: "1 while the store's database answers this coordinator's probe, else 0 (one series per store of the config)",
    labelNames: ['store'] as const,
    registers: [this.registry],
  });
  readonly reclaims = new Counter({
    name: 'tc_reclaims_total',
    help: 'Shards recovered, by how (worker_gone, lease_expired, stale_queue, channel_lost, xautoclaim, abandoned)',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });
  readonly fenced = new Counter({
    name: 'tc_fenced_writes_total',
    help: 'Coordinator writes refused because another coordinator holds a newer epoch',
    registers: [this.registry],
  });
  readonly alerts = new Counter({
    name: 'tc_alerts_total',
    help: 'Alerts raised, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly workerBusy = new Gauge({
    name: 'tc_worker_busy_slots',
    help: 'Shards this worker is running now',
    registers: [this.registry],
  });
  readonly purged = new Counter({
    name: 'tc_purged_total',
    help: 'Rows deleted by retention, by table (timeouts, scans, workers)',
    labelNames: ['table'] as const,
    registers: [this.registry],
  });
  readonly historyPartitions = new Counter({
    name: 'tc_history_partitions_total',
    help: 'Daily partitions of the history (done_timeouts) retention created, dropped, or left to its next run (skipped: a lock it did not get)',
    labelNames: ['action'] as const,
    registers: [this.registry],
  });

  // The vacuum horizon of each database the center uses (docs/vacuum-horizon.md), exported by the
  // leader of that database (the center's leader: the center and each business database that is not
  // a store; a store's leader: its store) every coordinator.horizonCheckIntervalMs. One series per
  // kind of holder: its oldest. Labels that do not apply are empty.
  readonly horizonAgeXids = new Gauge({
    name: 'tc_vacuum_horizon_age_xids',
    help: 'Age in transactions (age(xmin)) of the oldest snapshot or transaction holding back VACUUM, by database and holder (backend, standby_feedback, replication_slot, prepared_transaction); leader only',
    labelNames: ['database', 'holder', 'pid', 'application_name', 'slot', 'gid'] as const,
    registers: [this.registry],
  });
  readonly horizonAgeSeconds = new Gauge({
    name: 'tc_vacuum_horizon_age_seconds',
    help: 'Age in seconds of the same holder where PostgreSQL knows its start (a backend: xact_start; a prepared transaction: prepared); absent for slots and standby feedback; leader only',
    labelNames: ['database', 'holder', 'pid', 'application_name', 'slot', 'gid'] as const,
    registers: [this.registry],
  });
  readonly horizonHolder = new Gauge({
    name: 'tc_vacuum_horizon_holder_info',
    help: 'Always 1: what the oldest holder of each kind is doing (state, transaction and query start), by database and holder; leader only',
    labelNames: ['database', 'holder', 'pid', 'application_name', 'state', 'xact_start', 'query_start', 'slot', 'gid'] as const,
    registers: [this.registry],
  });
  readonly horizonSeesAll = new Gauge({
    name: 'tc_vacuum_horizon_sees_all_sessions',
    help: "1 when the coordinator's role sees every session's snapshot (pg_read_all_stats, granted by pg_monitor), 0 when other roles' sessions are hidden from it; by database; leader only",
    labelNames: ['database'] as const,
    registers: [this.registry],
  });

  // Flow control per kind, exported by the leading coordinator (read every tick). Max running
  // shards and rate limit have no series while the kind is unlimited.
  readonly kindPaused = new Gauge({
    name: 'tc_kind_paused',
    help: '1 while the kind is paused (nothing of it starts), by kind; leader only',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly kindMaxRunningShards = new Gauge({
    name: 'tc_kind_max_running_shards',
    help: 'Cap on the shards of the kind queued or running at once, fleet-wide; leader only, absent when uncapped',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly kindRateLimit = new Gauge({
    name: 'tc_kind_rate_limit',
    help: 'Rate limit of the kind in timeouts per second, fleet-wide; leader only, absent when unlimited',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly targetRateLimit = new Gauge({
    name: 'tc_target_rate_limit',
    help: 'Rate limit of a business database in timeouts per second, over all kinds whose shards target it, fleet-wide; leader only, absent when unlimited',
    labelNames: ['target'] as const,
    registers: [this.registry],
  });
  readonly circuitBreaker = new Gauge({
    name: 'tc_circuit_breaker_state',
    help: 'Circuit breaker of the external path per kind and target, in this worker: 0 closed, 1 open, 2 half-open',
    labelNames: ['kind', 'target'] as const,
    registers: [this.registry],
  });
  readonly batchFailures = new Counter({
    name: 'tc_external_batch_failures_total',
    help: 'External shards whose whole batch failed (target down, time limit, 5xx, 401/403/404, 429, malformed reply, breaker open) and went back with backoff, by kind and target',
    labelNames: ['kind', 'target'] as const,
    registers: [this.registry],
  });

  readonly buildInfo = new Gauge({
    name: 'tc_build_info',
    help: 'Always 1: the timeout-center version this process runs and the newest schema migration it knows (docs/upgrading.md)',
    labelNames: ['version', 'schema'] as const,
    registers: [this.registry],
  });

  constructor(processRole: string) {
    this.registry.setDefaultLabels({ role: processRole });
    collectDefaultMetrics({ register: this.registry, prefix: 'tc_process_' });
    const build = thisBuild();
    this.buildInfo.set({ version: build.version, schema: String(build.schemaVersion) }, 1);
  }
}
