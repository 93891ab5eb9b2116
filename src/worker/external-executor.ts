// The external path: a shard whose handler runs outside the center's database (a business
// database, an HTTP service, a code handler). A run reads top to bottom as claim, apply in the
// business transaction, record, in one of two protocols that share those steps (external/):
//   - commit first (external/commit-first.ts): the claim commits in the center before the handler
//     is called, the handler's transaction in the target writes a marker keyed by the shard, and
//     the record follows the target's commit under the shard's row lock; a re-run after a crash
//     between the two commits records what the marker says. Every run on the Citus layout, with an
//     HTTP handler, a re-run, and any run where two phases are not possible;
//   - two phases (external/two-phase-run.ts): a shard's first run whose handler runs in a business
//     database, where the center allows prepared transactions: claim and record in one center
//     transaction, PREPAREd before the business COMMIT (two-phase.ts; prepared-resolver.ts finishes
//     what a stopped worker leaves prepared, by the marker). A run that backs out hands the shard
//     to the commit-first run of the same attempt.
// The steps, in the order a run takes them, each a module that holds both protocols' forms of it:
// external/claim.ts, external/apply.ts (with the fence, external/center-lock.ts, on the
// commit-first path), external/record.ts; the center's layout picks the commit-first claim and
// record statements once (external/center-forms.ts).
// Batch-level failures (failures.ts) retry the whole shard later behind a circuit breaker per kind
// and target (breakers.ts); row-level failures are split and isolated inside the business
// transaction, in savepoints (batch-isolation.ts). docs/architecture.md draws the protocol.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Metrics } from '../observability/metrics.js';
import type { CircuitBreakers } from './breakers.js';
import type { BusinessDatabases } from './business-db.js';
import { centerForms } from './external/center-forms.js';
import { runCommitFirst } from './external/commit-first.js';
import type { ExternalContext, ExternalHandler, ExternalOutcome } from './external/context.js';
import { runTwoPhase, type CommitFirst } from './external/two-phase-run.js';
import type { Lease } from './lease.js';
import { runsInTwoPhases } from './two-phase.js';

export type { ExternalOutcome };

export class ExternalExecutor {
  private readonly context: ExternalContext;
  /** Runs commit in two phases where they can (runTwoPhase): the center's server allows prepared
   *  transactions (max_prepared_transactions > 0), checked by the worker at start. Turned off for
   *  good when PREPARE TRANSACTION says they are off. */
  private twoPhase: boolean;

  constructor(pool: pg.Pool, databases: BusinessDatabases, breakers: CircuitBreakers, metrics: Metrics, options: { twoPhase?: boolean } = {}) {
    this.context = { pool, databases, breakers, metrics };
    this.twoPhase = options.twoPhase ?? false;
  }

  /** Runs a leased shard: in two phases when it may (and the run does not back out), else commit
   *  first. */
  async run(lease: Lease, handler: ExternalHandler, log: Logger): Promise<ExternalOutcome> {
    const forms = centerForms(lease);
    let handedOn: CommitFirst = {};
    if (this.twoPhase && forms.twoPhase && lease.attempts === 1 && runsInTwoPhases(handler.external)) {
      const outcome = await runTwoPhase(this.context, lease, handler, log);
      if ('status' in outcome) return outcome;
      if (outcome.preparedOff) this.twoPhase = false;
      handedOn = outcome;
    }
    return runCommitFirst(this.context, forms, lease, handler, log, handedOn.batchFailure);
  }
}
