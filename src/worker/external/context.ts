// What every step of an external run is given: the center's pool, the business databases' pools,
// the circuit breakers and the metrics (external-executor.ts builds it once per worker), and the
// handler and outcome types of the path.
import type pg from 'pg';
import type { Metrics } from '../../observability/metrics.js';
import type { CircuitBreakers } from '../breakers.js';
import type { BusinessDatabases } from '../business-db.js';
import type { ExternalTarget, ResolvedHandler } from '../handlers.js';
import type { ShardOutcome } from '../outcome.js';

export interface ExternalContext {
  /** The center's database. */
  readonly pool: pg.Pool;
  readonly databases: BusinessDatabases;
  readonly breakers: CircuitBreakers;
  readonly metrics: Metrics;
}

/** A kind's handler on the external path. */
export type ExternalHandler = ResolvedHandler & { external: ExternalTarget };

export type ExternalOutcome = Exclude<ShardOutcome, { status: 'held' }>;
