// Table types for kysely, matching sql/0001_init.sql. Used by the inspection CLI and the
// business API; the hot path runs the hand-written statements in src/*/queries.
import type { ColumnType, Generated } from 'kysely';

type Timestamp = ColumnType<Date, Date | string, Date | string>;
/** The type of a timestamptz column, for raw SQL values (now(), now() - ...). */
export type DbTimestamp = Timestamp;

export type TimeoutState = 'pending' | 'dispatched' | 'done' | 'cancelled' | 'failed';
export type ShardState = 'queued' | 'running' | 'done' | 'failed';
export type ScanState = 'mapping' | 'mapped' | 'reduced';

export interface KindsTable {
  kind: string;
  shard_size: number;
  max_attempts: number;
  backoff_ms: number;
  handler_type: string;
  description: string | null;
  updated_at: Generated<Timestamp>;
  // Flow control (sql/0006, sql/0008).
  paused: Generated<boolean>;
  max_running_shards: number | null;
  rate_limit: string | null;
  controls_source: Generated<'config' | 'operator'>;
  controls_changed_by: string | null;
  controls_changed_at: Timestamp | null;
  config_paused: Generated<boolean>;
  config_max_running_shards: number | null;
  config_rate_limit: string | null;
}

export interface TimeoutsTable {
  id: Generated<number>;
  /** The enum timeout_center.kind (sql/0017): read and written as the kind's name. In a
   *  comparison, kysely's untyped parameter takes the enum's type (a known kind only). */
  kind: string;
  biz_id: string;
  due_at: Timestamp;
  payload: unknown | null;
  state: Generated<TimeoutState>;
  available_at: Generated<Timestamp>;
  attempts: Generated<number>;
  shard_id: number | null;
  result: 'applied' | 'skipped' | null;
  last_error: string | null;
  created_at: Generated<Timestamp>;
  finished_at: Timestamp | null;
}

/** A done timeout, moved out of timeouts by the worker that closed it (sql/0010_done_timeouts.sql). */
export interface DoneTimeoutsTable {
  id: number;
  kind: string;
  biz_id: string;
  due_at: Timestamp;
  payload: unknown | null;
  attempts: number;
  shard_id: number | null;
  result: 'applied' | 'skipped';
  last_error: string | null;
  created_at: Timestamp;
  finished_at: Timestamp;
}

/** Every timeout, live or done (timeouts UNION ALL done_timeouts). */
export interface AllTimeoutsView {
  id: number;
  kind: string;
  biz_id: string;
  due_at: Timestamp;
  payload: unknown | null;
  state: TimeoutState;
  available_at: Timestamp;
  attempts: number;
  shard_id: number | null;
  result: 'applied' | 'skipped' | null;
  last_error: string | null;
  created_at: Timestamp;
  finished_at: Timestamp | null;
}

export interface ScansTable {
  id: Generated<number>;
  epoch: number;
  coordinator: string;
  cutoff: Timestamp;
  state: Generated<ScanState>;
  claimed: Generated<number>;
  shard_count: Generated<number>;
  done: number | null;
  skipped: number | null;
  failed: number | null;
  retried: number | null;
  failures: unknown | null;
  started_at: Generated<Timestamp>;
  mapped_at: Timestamp | null;
  reduced_at: Timestamp | null;
}

export interface ShardsTable {
  id: Generated<number>;
  scan_id: number;
  kind: string;
  seq: number;
  /** Timeouts the shard claimed (0 until it ran). */
  size: number;
  /** Most due timeouts the shard may claim (set by the map). */
  claim_limit: number;
  /** Business database the shard runs against (sql/0005); null for the same-database path. */
  target: string | null;
  state: Generated<ShardState>;
  attempts: Generated<number>;
  owner: string | null;
  lease_token: string | null;
  lease_expires_at: Timestamp | null;
  published_at: Timestamp | null;
  publish_count: Generated<number>;
  done_count: number | null;
  skipped_count: number | null;
  failed_count: number | null;
  retried_count: number | null;
  error_sample: string | null;
  created_at: Generated<Timestamp>;
  started_at: Timestamp | null;
  finished_at: Timestamp | null;
  /** Planned ahead of its rows' due instant (sql/0011): no worker claims before this time. */
  not_before: Timestamp | null;
  /** The attempt whose run last began its claim, 0 for none (sql/0018): a re-run treats its rows
   *  as suspects of killing workers only when an earlier run got that far. */
  claim_attempt: Generated<number>;
}

export interface CoordinatorLeaseTable {
  id: number;
  epoch: number;
  holder: string | null;
  acquired_at: Timestamp | null;
}

export interface WorkersTable {
  worker_id: string;
  host: string;
  pid: number;
  kinds: string[];
  started_at: Generated<Timestamp>;
  last_seen_at: Generated<Timestamp>;
  stopped_at: Timestamp | null;
}

// Inspection views (sql/0001_init.sql), read by the operator CLI. Read-only.
export interface ScanReportView {
  scan_id: number;
  state: ScanState;
  cutoff: Date;
  claimed: number;
  shard_count: number;
  done: number | null;
  skipped: number | null;
  failed: number | null;
  retried: number | null;
  started_at: Date;
  mapped_at: Date | null;
  reduced_at: Date | null;
  duration: unknown | null;
  epoch: number;
  coordinator: string;
  failures: unknown | null;
}

export interface ShardReportView {
  shard_id: number;
  scan_id: number;
  kind: string;
  size: number;
  state: ShardState;
  attempts: number;
  owner: string | null;
  lease_expires_at: Date | null;
  done: number | null;
  skipped: number | null;
  failed: number | null;
  retried: number | null;
  error_sample: string | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
  duration: unknown | null;
  publish_count: number;
  claim_limit: number;
  /** Business database the shard runs against (sql/0005); null for the same-database path. */
  target: string | null;
}

export interface FailedTimeoutsView {
  timeout_id: number;
  kind: string;
  biz_id: string;
  due_at: Date;
  attempts: number;
  last_error: string | null;
  shard_id: number | null;
  scan_id: number | null;
  failed_at: Date | null;
  payload: unknown | null;
}

export interface BacklogView {
  kind: string;
  pending_due: number;
  in_flight: number;
  oldest_due_at: Date | null;
  oldest_lag: unknown | null;
  /** The kind is paused (sql/0008): its due timeouts wait on purpose. */
  paused: boolean;
}

export interface Database {
  'timeout_center.kinds': KindsTable;
  'timeout_center.timeouts': TimeoutsTable;
  'timeout_center.done_timeouts': DoneTimeoutsTable;
  'timeout_center.all_timeouts': AllTimeoutsView;
  'timeout_center.scans': ScansTable;
  'timeout_center.shards': ShardsTable;
  'timeout_center.coordinator_lease': CoordinatorLeaseTable;
  'timeout_center.workers': WorkersTable;
  'timeout_center.scan_report': ScanReportView;
  'timeout_center.shard_report': ShardReportView;
  'timeout_center.failed_timeouts': FailedTimeoutsView;
  'timeout_center.backlog': BacklogView;
}
