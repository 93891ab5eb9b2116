import { defineConfig } from 'vitest/config';
import SizeSequencer from './test/helpers/size-sequencer.js';

// Two groups, the second after the first (sequence.groupOrder).
// 1. Most files, two at a time: they start real processes and mostly wait on them (leases,
//    restarts, failovers), each with its own databases, Redis key prefix and servers on free ports,
//    and assert invariants, not timings. Two at a time on a 2-core box nearly halves the wall time.
// 2. Alone, one at a time, once the first group is done: files that assert a timing or a rate
//    (rate limits within 5 %, takeover within goneAfterMs, exits within the drain bound, lateness
//    within 2x across stores, answers within a bound), and files that rebuild dist/ (npm start).
const ALONE = [
  'test/docs/npm-start.test.ts',
  'test/docs/readme.test.ts',
  'test/release/package.test.ts',
  'test/integration/flow-control.test.ts',
  'test/integration/target-rate-limit.test.ts',
  'test/integration/shutdown.test.ts',
  'test/integration/lease-renewal.test.ts',
  'test/integration/lateness-at-commit.test.ts',
  'test/integration/head-of-line.test.ts',
  'test/integration/count-ahead.test.ts',
  'test/integration/metrics-health.test.ts',
  'test/integration/settle.test.ts',
  'test/api/api.test.ts',
  'test/console/console.test.ts',
  'test/faults/worker-takeover.test.ts',
  'test/faults/stores-fairness.test.ts',
  'test/faults/clock-skew.test.ts',
  'test/faults/redis-cluster.test.ts',
  'test/faults/redis-sentinel.test.ts',
  'test/faults/business-databases.test.ts',
  'test/faults/unsafe-payment-order.test.ts',
  'test/faults/payment-race.test.ts',
  'test/faults/settle-race.test.ts',
  'test/faults/settle-external-race.test.ts',
  // upgrades with work in flight: inserts wait at most 200 ms and closes pause at most 2 s
  'test/upgrade/upgrade.test.ts',
];

const shared = {
  globalSetup: ['test/helpers/global-setup.ts'],
  testTimeout: 120_000,
  hookTimeout: 120_000,
};

export default defineConfig({
  test: {
    reporters: ['default', './test/helpers/slow-file-reporter.ts'],
    // Largest file first, as a clean checkout (CI) runs them, never the cached order of the last run.
    sequence: { sequencer: SizeSequencer },
    projects: [
      {
        extends: false,
        test: { ...shared, name: 'together', include: ['test/**/*.test.ts'], exclude: ALONE, maxWorkers: 2, sequence: { groupOrder: 0 } },
      },
      { extends: false, test: { ...shared, name: 'alone', include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});
