// One circuit breaker per kind and target in each worker (cockatiel): after
// breaker.consecutiveFailures batch-level failures in a row the breaker opens and the worker stops
// calling that target; after halfOpenAfterMs one trial call goes through, and a success closes it.
// Row-level failures never count (they do not throw out of the apply). Every change of state shows
// in the tc_circuit_breaker_state gauge, in timeout_center.circuit_breakers (read by `status`) and
// as an alert (circuit_open, circuit_closed).
import { CircuitState, ConsecutiveBreaker, circuitBreaker, handleWhen, type CircuitBreakerPolicy } from 'cockatiel';
import type pg from 'pg';
import { sql } from '../db/queries.js';
import type { Logger } from 'pino';
import type { Alerter } from '../alerts/alerter.js';
import type { BreakerConfig } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { describeError, isBatchLevel } from './failures.js';

const STATE_NAME: Record<CircuitState, 'closed' | 'open' | 'half_open'> = {
  [CircuitState.Closed]: 'closed',
  [CircuitState.Open]: 'open',
  [CircuitState.HalfOpen]: 'half_open',
  [CircuitState.Isolated]: 'open',
};

interface Entry {
  policy: CircuitBreakerPolicy;
  /** Batch-level failures in a row, for the retry backoff. */
  failures: number;
  lastError: string | undefined;
  /** The state before the current one: an open after a failed trial (half-open) is no news. */
  state: CircuitState;
}

export class CircuitBreakers {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly config: BreakerConfig,
    private readonly pool: pg.Pool,
    private readonly workerId: string,
    private readonly metrics: Metrics,
    private readonly alerter: Alerter,
    private readonly logger: Logger,
  ) {}

  private entry(kind: string, target: string): Entry {
    const key = `${kind}\u0000${target}`;
    const entry = this.entries.get(key);
    if (entry) return entry;
    const policy = circuitBreaker(handleWhen(isBatchLevel), {
      halfOpenAfter: this.config.halfOpenAfterMs,
      breaker: new ConsecutiveBreaker(this.config.consecutiveFailures),
    });
    const created: Entry = { policy, failures: 0, lastError: undefined, state: CircuitState.Closed };
    policy.onStateChange((state) => void this.changed(kind, target, state, created));
    policy.onSuccess(() => (created.failures = 0));
    policy.onFailure(({ reason }) => {
      if ('error' in reason && isBatchLevel(reason.error)) {
        created.failures += 1;
        created.lastError = describeError(reason.error);
      }
    });
    this.entries.set(key, created);
    this.metrics.circuitBreaker.set({ kind, target }, 0);
    return created;
  }

  /** Runs fn through the breaker; throws cockatiel's BrokenCircuitError while it is open. */
  execute<T>(kind: string, target: string, fn: () => Promise<T>): Promise<T> {
    return this.entry(kind, target).policy.execute(fn);
  }

  /** How long a batch that failed as a whole waits before its next try: the breaker's pause while
   *  it is open, else backoffMs doubled per failure in a row (capped), with jitter. */
  retryDelayMs(kind: string, target: string, backoffMs: number, retryAfterMs?: number): number {
    const e = this.entry(kind, target);
    if (e.policy.state === CircuitState.Open) return this.config.halfOpenAfterMs;
    const exp = Math.min(this.config.maxRetryDelayMs, Math.max(100, backoffMs) * 2 ** Math.max(0, e.failures - 1));
    const jittered = Math.round(exp * (0.75 + Math.random() * 0.5));
    return Math.min(this.config.maxRetryDelayMs, Math.max(jittered, retryAfterMs ?? 0));
  }

  private async changed(kind: string, target: string, state: CircuitState, entry: Entry): Promise<void> {
    const name = STATE_NAME[state];
    const previous = entry.state;
    entry.state = state;
    this.metrics.circuitBreaker.set({ kind, target }, state === CircuitState.Closed ? 0 : state === CircuitState.HalfOpen ? 2 : 1);
    const log = this.logger.child({ kind, target, breaker: name });
    if (state === CircuitState.Open && previous === CircuitState.HalfOpen) {
      log.info({ lastError: entry.lastError }, 'circuit breaker trial call failed: open again');
    } else if (state === CircuitState.Open) {
      log.warn({ lastError: entry.lastError }, 'circuit breaker opened: calls to this target pause');
      void this.alerter.raise({
        type: 'circuit_open',
        message: `circuit breaker for ${kind} -> ${target} opened in worker ${this.workerId} after ${this.config.consecutiveFailures} batch failures in a row (last: ${entry.lastError ?? '?'}); its timeouts wait and are retried, none fails for good`,
        details: { kind, target, worker: this.workerId, lastError: entry.lastError },
      });
    } else if (state === CircuitState.Closed) {
      log.info('circuit breaker closed: the target answers again');
      void this.alerter.raise({
        type: 'circuit_closed',
        message: `circuit breaker for ${kind} -> ${target} closed in worker ${this.workerId}: the target answers again`,
        details: { kind, target, worker: this.workerId },
      });
    } else {
      log.info('circuit breaker half-open: one trial call');
    }
    await this.pool
      .query(sql('worker/breaker_state', { kind, target, worker: this.workerId, state: name, lastError: entry.lastError ?? null }))
      .catch((err: unknown) => this.logger.warn({ err, kind, target }, 'could not record the circuit breaker state'));
  }

  /** A stopping worker's breakers no longer apply. */
  async forget(): Promise<void> {
    await this.pool.query(sql('worker/breaker_forget', { worker: this.workerId })).catch(() => {});
  }
}
