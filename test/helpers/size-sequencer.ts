import { statSync } from 'node:fs';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Files in the order a clean checkout runs them, always: largest first, as vitest does when it has
 * no results from an earlier run. Vitest's default puts the last run's failures and then its
 * longest files first, from a cache in node_modules; on this suite that paired the two Citus fault
 * files (two clusters and two fleets on two cores, load 15.7) and each failed a test, an order CI,
 * which installs afresh, never runs. Same order here as in CI, so a local run reproduces CI's.
 */
export default class SizeSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const size = (f: TestSpecification) => statSync(f.moduleId).size;
    return [...files].sort((a, b) => size(b) - size(a));
  }
}
