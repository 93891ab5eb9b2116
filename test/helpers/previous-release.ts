// The previous release, built from its commit beside this checkout, for the upgrade tests
// (test/upgrade/): its CLI runs the fleet that the current code upgrades, or rolls back to.
// The previous release is 1.0.0, the commit that landed as it. The build is kept in .scratch/
// (ignored by git) and reused while the commit stays the same.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PREVIOUS_RELEASE = {
  /** What the docs call it (docs/upgrading.md). */
  name: '1.0.0',
  version: '1.0.0',
  commit: '2b278f2cff20ac98b811b8f366b8a8704262a631',
  /** Its newest migration. */
  schemaVersion: 40,
};

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Why the previous release cannot be built here (no git, or a clone without its commit), or undefined. */
export function previousReleaseMissing(): string | undefined {
  const has = () => {
    try {
      execFileSync('git', ['-C', ROOT, 'cat-file', '-e', `${PREVIOUS_RELEASE.commit}^{commit}`], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  if (has()) return undefined;
  // A shallow clone: its origin may still have the commit.
  try {
    execFileSync('git', ['-C', ROOT, 'fetch', '--quiet', 'origin', PREVIOUS_RELEASE.commit], { stdio: 'ignore', timeout: 60_000 });
  } catch {
    // no origin, or it does not have it either
  }
  if (has()) return undefined;
  return `the previous release's commit ${PREVIOUS_RELEASE.commit.slice(0, 7)} is not in this checkout's git history, nor at its origin (a shallow clone, or no .git): clone the repository with its history to run the upgrade tests`;
}

/** Builds it once (git archive of its commit, this checkout's node_modules, its own build) and
 *  returns the path of its CLI. */
export function buildPreviousRelease(): string {
  const dir = join(ROOT, '.scratch', 'previous-release', PREVIOUS_RELEASE.commit);
  const cli = join(dir, 'dist', 'cli', 'main.js');
  if (existsSync(cli)) return cli;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const archive = execFileSync('git', ['-C', ROOT, 'archive', '--format=tar', PREVIOUS_RELEASE.commit], { maxBuffer: 512 * 1024 * 1024 });
  execFileSync('tar', ['-x', '-C', dir], { input: archive });
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  execFileSync(process.execPath, ['scripts/compile-sql.mjs'], { cwd: dir, stdio: 'pipe' });
  // The compiler `npm run build` runs (node_modules/.bin/tsc), as its package.json names it.
  execFileSync(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json'], { cwd: dir, stdio: 'pipe' });
  if (!existsSync(cli)) throw new Error(`building the previous release in ${dir} made no ${cli}`);
  return cli;
}
