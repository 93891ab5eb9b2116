// bench:external-statements small, so it cannot rot: both drains run to the end with their checks
// (every timeout in the history, applied or skipped as its order, each unpaid order closed once) and
// the figures are printed. No timing assertions.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

describe('bench:external-statements, small', () => {
  it('drains the same rows both ways and prints each statement per timeout', { timeout: 120_000 }, async () => {
    const child = spawn(
      process.execPath,
      ['--experimental-transform-types', '--no-warnings', 'bench/external-statements.ts', '--n', '2000', '--k', '500', '--rounds', '1'],
      {
        cwd: root,
        env: process.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), 110_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    expect(code, output.slice(-4000)).toBe(0);
    expect(output).toMatch(/round 1: external claim [\d.]+ µs\/timeout \(shard by shard( [\d.]+){4} ms\)/);
    expect(output).toMatch(/Same-database \/ external [\d.]+/);
    expect(output).toMatch(/round 1: two-phase claim [\d.]+ µs\/timeout, move [\d.]+: .* Same-database \/ two-phase [\d.]+/);
  });

  it('refuses a count that is not a multiple of the shard size, creating nothing', async () => {
    const child = spawn(process.execPath, ['--experimental-transform-types', '--no-warnings', 'bench/external-statements.ts', '--n', '1001', '--k', '500'], {
      cwd: root,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    expect(code).toBe(2);
    expect(output).toContain('--n (1001) must be a multiple of --k (500)');
  });
});
