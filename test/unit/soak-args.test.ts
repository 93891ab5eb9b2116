// The soak's command line (test/soak/args.ts) and its gap measure (test/soak/check.ts), without
// running a soak: a bad --topology is refused, naming the allowed values, with the CLI's bad-input
// exit code, before anything is built or started.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit-codes.js';
import { parseSoakArgs, SoakUsageError, TOPOLOGIES } from '../soak/args.ts';
import { longestGap } from '../soak/check.ts';

const SOAK = fileURLToPath(new URL('../soak/soak.ts', import.meta.url));

function usageError(argv: string[]): SoakUsageError {
  try {
    parseSoakArgs(argv);
  } catch (err) {
    expect(err).toBeInstanceOf(SoakUsageError);
    return err as SoakUsageError;
  }
  throw new Error(`parseSoakArgs(${JSON.stringify(argv)}) did not throw`);
}

describe('npm run soak: arguments', () => {
  it('defaults to the single topology, 10 minutes, seed 1', () => {
    expect(parseSoakArgs([])).toEqual({ minutes: 10, seed: 1, topology: 'single' });
  });

  it('takes every topology, and the other flags', () => {
    expect(TOPOLOGIES).toEqual(['single', 'stores', 'cluster', 'sentinel']);
    for (const t of TOPOLOGIES) expect(parseSoakArgs(['--topology', t]).topology).toBe(t);
    expect(parseSoakArgs(['--two-phase'])).toEqual({ minutes: 10, seed: 1, topology: 'single', twoPhase: true });
    expect(parseSoakArgs(['--minutes', '1.5', '--seed', '7', '--out', 'x.json', '--topology=stores'])).toEqual({
      minutes: 1.5,
      seed: 7,
      out: 'x.json',
      topology: 'stores',
    });
  });

  it('refuses a bad topology, naming the allowed values, with exit code 2 (bad input)', () => {
    const err = usageError(['--topology', 'citus']);
    expect(err.message).toBe('--topology must be one of single, stores, cluster, sentinel, got "citus"');
    expect(err.exitCode).toBe(EXIT.badInput);
    expect(usageError(['--topology']).message).toMatch(/--topology <value>' argument missing/);
  });

  it('refuses an unknown flag and a bad number', () => {
    expect(usageError(['--topolgy', 'stores']).message).toMatch(/Unknown option '--topolgy'/);
    expect(usageError(['--minutes', '0']).message).toBe('--minutes must be a positive number, got "0"');
    expect(usageError(['--seed', '1.5']).message).toBe('--seed must be a whole number >= 0, got "1.5"');
    expect(usageError(['stores']).message).toMatch(/stores/);
  });

  it('the script exits 2 on a bad topology, before it starts anything', () => {
    const r = spawnSync(process.execPath, ['--experimental-transform-types', '--no-warnings', SOAK, '--topology', 'cluser'], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      'soak: --topology must be one of single, stores, cluster, sentinel, got "cluser"\n' +
        'usage: npm run soak -- [--minutes N] [--seed N] [--out file.json] [--topology single|stores|cluster|sentinel] [--two-phase]\n',
    );
    expect(r.stdout).toBe('');
  });
});

describe('npm run soak: the gap in closes after a fault', () => {
  const times = Float64Array.from([0, 100, 200, 1500, 1600, 4000, 4100]);

  it('counts from the fault to the first close, and between closes inside the window', () => {
    expect(longestGap(times, 150, 1550)).toEqual({ gapMs: 1300, fromMs: 200 });
    expect(longestGap(times, 1000, 1550)).toEqual({ gapMs: 500, fromMs: 1000 });
    // A wait that begins inside the window is measured whole.
    expect(longestGap(times, 150, 3000)).toEqual({ gapMs: 2400, fromMs: 1600 });
  });

  it('leaves a wait during which the next fault began to that fault', () => {
    expect(longestGap(times, 150, 3000, 3000)).toEqual({ gapMs: 1300, fromMs: 200 });
    // Nothing closed between this fault (250) and the next (1000): this one's wait ends there.
    expect(longestGap(times, 250, 1000, 1000)).toEqual({ gapMs: 750, fromMs: 250 });
  });

  it('with no close after the fault, the whole window', () => {
    expect(longestGap(times, 5000, 6000)).toEqual({ gapMs: 1000, fromMs: 5000 });
  });
});
