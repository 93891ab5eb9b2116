// Table types for kysely, matching sql/0001_init.sql. Used by the inspection CLI and the
// business API; the hot path runs the hand-written statements in src/*/queries.
import type { ColumnType, Generated } from 'kysely';

type Timestamp = ColumnType<Date, Date | string, Date | string>;

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
}

export interface TimeoutsTable {
  id: Generated<number>;
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
  size: number;
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

export interface Database {
  'timeout_center.kinds': KindsTable;
  'timeout_center.timeouts': TimeoutsTable;
  'timeout_center.scans': ScansTable;
  'timeout_center.shards': ShardsTable;
  'timeout_center.coordinator_lease': CoordinatorLeaseTable;
  'timeout_center.workers': WorkersTable;
}
