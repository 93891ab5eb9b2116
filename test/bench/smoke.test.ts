// The benchmark's smoke mode, so the bench cannot rot: every system drains a few thousand
// timeouts (burst), timeout-center and the minimal limit take a few seconds of steady arrivals, and the pending-scale and memory
// workloads run small; and the statement bench (bench/statements.ts) runs each variant small. Asserts the run completed and every correctness check passed; no timing
// assertions (the box is shared, timings are noise here).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

interface Checked {
  variant: string;
  correctness: { ok: boolean; problems: string[] };
  timedOut: boolean;
}

describe('bench --smoke', () => {
  it('runs every system and workload with correctness checks passing', { timeout: 150_000 }, async () => {
    const out = mkdtempSync(join(tmpdir(), 'tc-bench-smoke-'));
    const { code, output } = await runBenchScript('bench/run.ts', ['--smoke', '--out', out], {
      env: { ...process.env, BENCH_REDIS_URL: process.env['TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379' },
      killAfterMs: 140_000,
    });
    expect(code, output.slice(-4000)).toBe(0);

    const results = JSON.parse(readFileSync(join(out, 'bench', 'results.json'), 'utf8')) as {
      variants: { id: string; system: string }[];
      burst: Checked[];
      steady: Checked[];
      memory: Checked[];
      pending?: { loaded: { statementsPerTick: number }; bytesPerTimeout: number };
      meta: { notes: string[] };
    };
    const systems = new Set(results.variants.map((v) => v.system));
    expect([...systems].sort()).toEqual(['bullmq', 'graphile-worker', 'minimal-sql', 'pg-boss-batch', 'timeout-center']);
    expect(results.burst.map((b) => b.variant).sort()).toEqual(results.variants.map((v) => v.id).sort());
    // Steady (smoke): timeout-center and the minimal limit; the peers run in the burst.
    const steadyIds = results.variants.filter((v) => v.system === 'timeout-center' || v.system === 'minimal-sql').map((v) => v.id);
    expect(results.steady.map((s) => s.variant).sort()).toEqual(steadyIds.sort());
    for (const r of [...results.burst, ...results.steady, ...results.memory]) {
      expect(r.timedOut, r.variant).toBe(false);
      expect(r.correctness.problems, r.variant).toEqual([]);
      expect(r.correctness.ok, r.variant).toBe(true);
    }
    expect(results.memory.length).toBeGreaterThan(0);
    expect(results.pending?.loaded.statementsPerTick).toBeGreaterThan(0);
    expect(results.pending?.bytesPerTimeout).toBeGreaterThan(0);
    expect(results.meta.notes.filter((n) => n.includes('failed'))).toEqual([]);
    const doc = readFileSync(join(out, 'benchmarks.md'), 'utf8');
    expect(doc).toContain('| system |');
    expect(doc).toContain('burst-throughput.svg');
  });

  it('bench:statements drains with every statement variant (each checks its own drain)', { timeout: 60_000 }, async () => {
    const { code, output } = await runBenchScript('bench/statements.ts', ['--n', '3000', '--k', '500']);
    expect(code, output).toBe(0);
    for (const v of ['minimal-in', 'minimal-array', 'limit-in', 'limit-array', 'worker-batch', 'worker-plain'])
      expect(output).toMatch(new RegExp(`^${v} +[\\d,]+ timeouts/s`, 'm'));
  });

  it('bench:explain profiles the worker claim and both limits (each run checks it took its k rows)', { timeout: 60_000 }, async () => {
    const { code, output } = await runBenchScript('bench/explain.ts', ['--n', '3000', '--k', '500', '--rounds', '1']);
    expect(code, output).toBe(0);
    for (const v of ['worker batch claim', 'limit, our schema', 'limit, minimal schema']) expect(output).toMatch(new RegExp(`^${v}: [\\d /]+ ms, median`, 'm'));
  });

  it('bench:stores drains one database, the external path and three stores beside the orders, each checked', { timeout: 90_000 }, async () => {
    const { code, output } = await runBenchScript('bench/stores.ts', ['--n', '2000', '--rounds', '1', '--lead-ms', '2000']);
    expect(code, output.slice(-4000)).toBe(0);
    for (const v of ['one-database', 'external', 'beside']) expect(output).toMatch(new RegExp(`^round 1 ${v} +2000 timeouts in`, 'm'));
    expect(output).toMatch(/all correct$/m);
  });
});

/** Runs a bench script to its end (killed after killAfterMs, if given); its exit code and its
 *  stdout and stderr together. */
async function runBenchScript(
  script: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; killAfterMs?: number } = {},
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--experimental-transform-types', '--no-warnings', script, ...args], {
    cwd: root,
    ...(options.env ? { env: options.env } : {}),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
  const timer = options.killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.killAfterMs);
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, output };
}
