// The soak's command line (`npm run soak -- ...`). Kept apart from the run itself, with no import
// of the engine, so that a bad flag is refused before anything is built, started or connected,
// and so that a unit test can check the parsing (test/unit/soak-args.test.ts).
import { parseArgs } from 'node:util';

/** What the soak runs against (docs/reliability.md, "Soak"):
 *  - single: the center, one business database on a private PostgreSQL, one private Redis;
 *  - stores: a kind stored beside its orders in three stores (a private PostgreSQL each), the
 *    center, one Redis; the nemesis also crashes each store's server in turn;
 *  - cluster: as single, on a Redis Cluster (3 masters + 3 replicas); the nemesis also kills a
 *    master (its replica is promoted) and recreates the cluster empty;
 *  - sentinel: as single, on Redis Sentinel (a master, a replica, 3 sentinels); the nemesis also
 *    kills the master (the sentinels promote the replica). */
export const TOPOLOGIES = ['single', 'stores', 'cluster', 'sentinel'] as const;
export type Topology = (typeof TOPOLOGIES)[number];

export interface SoakArgs {
  /** How long the nemesis and the arrivals run; then a drain and the checks. */
  minutes: number;
  /** Seeds the nemesis: the same seed draws the same sequence of faults. */
  seed: number;
  /** Writes the report (JSON) there too. */
  out?: string;
  topology: Topology;
  /** The center on a private PostgreSQL with max_prepared_transactions on, so the external kind's
   *  first runs commit in two phases (src/worker/two-phase.ts); without it the center is a
   *  database of the shared server, which allows none: every run commits first. */
  twoPhase?: true;
}

export const SOAK_USAGE = `usage: npm run soak -- [--minutes N] [--seed N] [--out file.json] [--topology ${TOPOLOGIES.join('|')}] [--two-phase]`;

/** A bad command line: nothing was started. Exit code 2, the CLI's "bad input" (src/cli/exit-codes.ts). */
export class SoakUsageError extends Error {
  override name = 'SoakUsageError';
  readonly exitCode = 2;
}

export function parseSoakArgs(argv: readonly string[]): SoakArgs {
  let values: { minutes: string; seed: string; out?: string | undefined; topology: string; 'two-phase': boolean };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        minutes: { type: 'string', default: '10' },
        seed: { type: 'string', default: '1' },
        out: { type: 'string' },
        topology: { type: 'string', default: 'single' },
        'two-phase': { type: 'boolean', default: false },
      },
    }));
  } catch (err) {
    // parseArgs names the unknown option or the missing value; the usage line follows it.
    throw new SoakUsageError((err as Error).message);
  }
  const topology = TOPOLOGIES.find((t) => t === values.topology);
  if (!topology) throw new SoakUsageError(`--topology must be one of ${TOPOLOGIES.join(', ')}, got "${values.topology}"`);
  const minutes = Number(values.minutes);
  if (!Number.isFinite(minutes) || minutes <= 0) throw new SoakUsageError(`--minutes must be a positive number, got "${values.minutes}"`);
  const seed = Number(values.seed);
  if (!Number.isInteger(seed) || seed < 0) throw new SoakUsageError(`--seed must be a whole number >= 0, got "${values.seed}"`);
  return { minutes, seed, topology, ...(values.out !== undefined ? { out: values.out } : {}), ...(values['two-phase'] ? { twoPhase: true as const } : {}) };
}
