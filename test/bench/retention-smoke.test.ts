// bench:retention small, so it cannot rot: each scenario loads, purges the way the retention
// service does, and reports the purge and the hot path meanwhile. No timing assertions.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

interface Result {
  scenario: string;
  purge: { rows: number; batches: number; runs?: { ms: number; rows: number }[] };
  hotPath: { baselineMs: { n: number }; errorCount: number };
}

describe('bench:retention, small', () => {
  it('purges a day of history with and without a held snapshot, and minute by minute after reuse', { timeout: 240_000 }, async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tc-retention-')), 'results.json');
    const args = ['--rows', '30000', '--baseline-s', '1', '--scenarios', 'free,held,minutes-reuse', '--minute-runs', '2', '--out', out];
    const child = spawn(process.execPath, ['--experimental-transform-types', '--no-warnings', 'bench/retention.ts', ...args], {
      cwd: root,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), 230_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    expect(code, output.slice(-4000)).toBe(0);
    const { results } = JSON.parse(readFileSync(out, 'utf8')) as { results: Result[] };
    expect(results.map((r) => r.scenario)).toEqual(['free', 'held', 'minutes-reuse']);
    for (const r of results) {
      expect(r.hotPath.errorCount, r.scenario).toBe(0);
      expect(r.hotPath.baselineMs.n, r.scenario).toBeGreaterThan(0);
    }
    // One day of three: about 10,000 rows (the rows at the day's edge move with now()).
    for (const r of results.slice(0, 2)) expect(Math.abs(r.purge.rows - 10_000), r.scenario).toBeLessThan(200);
    expect(results[2]!.purge.runs).toHaveLength(2);
    for (const run of results[2]!.purge.runs!) expect(run.rows).toBeGreaterThan(0);
  });
});
