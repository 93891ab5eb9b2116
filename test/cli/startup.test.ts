// A verb that reads or writes the database starts without the engine: no Redis client, no HTTP
// server, no metrics or tracing SDK, no circuit breaker (src/cli/program.ts loads the runtime, the
// console, the API and the demo inside their actions; src/db/reachability.ts stands apart from
// runtime.ts). Each of these once came in through one static import and cost every `status` at
// 3 a.m. a quarter of a second.
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const HOOK = fileURLToPath(new URL('../helpers/loaded-packages.mjs', import.meta.url));
const ENGINE_ONLY = ['ioredis', 'redlock', 'fastify', 'prom-client', 'cockatiel', '@opentelemetry/sdk-node', '@electric-sql/pglite'];

async function loadedBy(args: string[]): Promise<string[]> {
  const { stderr } = await promisify(execFile)(process.execPath, ['--import', HOOK, CLI, ...args], { env: { ...process.env, DATABASE_URL: undefined } });
  const line = stderr.split('\n').find((l) => l.startsWith('{"loadedPackages"'));
  if (!line) throw new Error(`no package list on stderr: ${stderr}`);
  return (JSON.parse(line) as { loadedPackages: string[] }).loadedPackages;
}

describe('CLI start-up', () => {
  for (const args of [['--help'], ['status', '--help'], ['retry', '--help'], ['migrate', '--help'], ['console', '--help'], ['api', '--help']]) {
    it(`timeout-center ${args.join(' ')} loads none of the engine's packages`, async () => {
      const loaded = await loadedBy(args);
      expect(loaded).toContain('commander');
      expect(loaded.filter((p) => ENGINE_ONLY.includes(p))).toEqual([]);
    });
  }

  it("keeps V8's compile cache, so a start after the first compiles nothing again", async () => {
    // Node puts it in os.tmpdir() (TMPDIR) unless NODE_COMPILE_CACHE names a directory.
    const tmp = mkdtempSync(join(tmpdir(), 'tc-compile-cache-'));
    try {
      const env = { ...process.env, TMPDIR: tmp, NODE_COMPILE_CACHE: undefined, NODE_DISABLE_COMPILE_CACHE: undefined };
      await promisify(execFile)(process.execPath, [CLI, '--help'], { env });
      const cached = readdirSync(join(tmp, 'node-compile-cache'), { recursive: true });
      expect(cached.length).toBeGreaterThan(0);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
