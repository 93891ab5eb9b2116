// The package as a user gets it from npm (issue 44). `npm pack` builds dist/ from a clean slate
// (the prepack script), and the tarball holds what a user runs and reads (dist/, sql/, the docs
// pages, package.json, README, LICENSE and CHANGELOG) and nothing of the tests, benchmarks or
// their results. Installed into an empty directory, its CLI prints the version, runs the demo on
// Node alone, migrates a fresh database, and runs a coordinator and worker there that close orders
// scheduled with the README's SQL, then stop cleanly on SIGTERM. Alone in its vitest group: it
// rebuilds dist/. About 30 s on an idle 2-core box; the timeouts are bounds for a loaded one.
import { execFileSync, spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forOrder, namedBlock } from '../docs/readme-blocks.js';
import { CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { CliProcess } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const repoPackage = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as PackageJson;

interface PackageJson {
  name: string;
  version: string;
  bin: Record<string, string>;
  main: string;
  types: string;
  engines: { node: string };
  files: string[];
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
}

interface PackResult {
  filename: string;
  files: { path: string; size: number; mode: number }[];
}

/**
 * The environment of every npm and CLI call here: the test's own, without what an enclosing
 * `npm test` put there (npm_config_local_prefix and npm_package_* would make the nested npm treat
 * the repository as its project) and without the connections of the environment, so each call
 * gets only what it is given.
 */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const keep = new Set(['npm_config_cache', 'npm_config_registry', 'npm_config_userconfig', 'npm_config_globalconfig']);
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^npm_/i.test(k) && !keep.has(k.toLowerCase())) continue;
    if (['INIT_CWD', 'DATABASE_URL', 'REDIS_URL', 'TIMEOUT_CENTER_CONFIG', 'LOG_LEVEL', 'TC_FAILPOINTS', 'NODE_OPTIONS'].includes(k)) continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

function run(cmd: string, args: string[], cwd: string, timeoutMs: number, env = cleanEnv()): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
  if (r.error) throw r.error;
  return r;
}

function output(r: SpawnSyncReturns<string>): string {
  return `exit ${r.status} (signal ${r.signal})\n--- stdout:\n${r.stdout.slice(-4000)}\n--- stderr:\n${r.stderr.slice(-4000)}`;
}

/** Every file under dir, as paths relative to it with '/' separators. */
function walk(dir: string, base = dir): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path, base) : [relative(base, path).split('\\').join('/')];
  });
}

/** Bare module specifiers a built file imports: the `import`/`export ... from '...'` lines tsc
 *  writes, and `import('...')` (the lazily loaded engine, demo and tracing SDK). */
function bareImports(js: string): string[] {
  const found = [
    ...js.matchAll(/^(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/gm),
    ...js.matchAll(/^import\s*['"]([^'"]+)['"]/gm),
    ...js.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return found.filter((s) => !s.startsWith('.') && !s.startsWith('/') && !s.startsWith('node:'));
}

const packageName = (specifier: string) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!);

let work: string;
let app: string;
let installed: string;
let pack: PackResult;
let db: TestDatabase | undefined;
const children: CliProcess[] = [];

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'tc-release-'));
  // A stale build: dist/ without the current files and with one no source makes any more. `npm
  // pack` must build afresh (prepack): the tarball then has every current file and not this one.
  rmSync(join(ROOT, 'dist'), { recursive: true, force: true });
  mkdirSync(join(ROOT, 'dist'));
  writeFileSync(join(ROOT, 'dist', 'left-from-an-old-build.js'), 'export {};\n');
  const packed = run('npm', ['pack', '--json', '--pack-destination', work], ROOT, 300_000);
  expect(packed.status, output(packed)).toBe(0);
  pack = (JSON.parse(packed.stdout) as PackResult[])[0]!;
  // Installed the way a user does, into an empty project of its own.
  app = join(work, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'tc-release-check', private: true }));
  const install = run('npm', ['install', join(work, pack.filename), '--prefer-offline', '--no-audit', '--no-fund'], app, 300_000);
  expect(install.status, output(install)).toBe(0);
  installed = join(app, 'node_modules', 'timeout-center');
}, 650_000);

afterAll(async () => {
  for (const c of children) {
    try {
      process.kill(-c.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await db?.drop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('npm pack', () => {
  it('builds dist/ afresh (prepack) and packs dist/, sql/, the docs pages, package.json, README, LICENSE and CHANGELOG only', () => {
    expect(pack.filename).toBe(`timeout-center-${repoPackage.version}.tgz`);
    const paths = pack.files.map((f) => f.path).sort();
    const TOP = ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md'];
    // docs/: the pages (README and CHANGELOG link to them) and the OpenAPI document; not the
    // benchmark and soak results or the console's screenshots.
    const stray = paths.filter((p) => !/^(dist|sql)\//.test(p) && !/^docs\/(reference\/)?[^/]+\.md$/.test(p) && p !== 'docs/openapi.json' && !TOP.includes(p));
    expect(stray, 'files outside dist/, sql/, the docs pages and the four top-level files').toEqual([]);
    for (const top of TOP) expect(paths).toContain(top);
    const linked = [...readFileSync(join(ROOT, 'README.md'), 'utf8').matchAll(/\]\((docs\/[^)#\s]+)/g)].map((m) => m[1]!);
    expect(linked.length).toBeGreaterThan(0);
    expect(
      linked.filter((l) => !paths.includes(l)),
      'README links to docs the package does not hold',
    ).toEqual([]);
    // Every migration and Citus statement the repository has; the build from clean: each built
    // file has its source, and the stale one is gone.
    const sql = walk(join(ROOT, 'sql')).map((p) => `sql/${p}`);
    expect(paths.filter((p) => p.startsWith('sql/'))).toEqual(sql.sort());
    expect(paths).not.toContain('dist/left-from-an-old-build.js');
    const built = paths.filter((p) => p.startsWith('dist/') && p.endsWith('.js'));
    const sources = walk(join(ROOT, 'src'))
      .filter((p) => p.endsWith('.ts') && !p.endsWith('.d.ts'))
      .map((p) => `dist/${p.replace(/\.ts$/, '.js')}`);
    expect(built).toEqual(sources.sort());
    for (const entry of [repoPackage.main, repoPackage.types, ...Object.values(repoPackage.bin)]) expect(paths).toContain(entry.replace(/^\.\//, ''));
  });

  it('ships source maps that carry their sources (no src/ in the package), so stack traces name the TypeScript lines', () => {
    const maps = walk(join(installed, 'dist')).filter((p) => p.endsWith('.js.map'));
    expect(maps.length).toBe(walk(join(installed, 'dist')).filter((p) => p.endsWith('.js')).length);
    for (const map of maps) {
      const m = JSON.parse(readFileSync(join(installed, 'dist', map), 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] };
      const missing = m.sources.filter((s, i) => typeof m.sourcesContent?.[i] !== 'string' && !existsSync(resolve(dirname(join(installed, 'dist', map)), s)));
      expect(missing, `${map} points at sources the package does not have`).toEqual([]);
    }
  });

  it('declares what a user installs: version, engines, an executable bin, and every module dist/ imports as a dependency', () => {
    const pkg = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as PackageJson;
    expect(pkg.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(pkg.engines.node).toBe('>=22');
    const bin = join(installed, pkg.bin['timeout-center']!);
    expect(readFileSync(bin, 'utf8').split('\n')[0]).toBe('#!/usr/bin/env node');
    expect(statSync(join(app, 'node_modules', '.bin', 'timeout-center')).mode & 0o111, 'the installed bin is executable').not.toBe(0);
    // No development tool among the dependencies, and every package the built code loads (at
    // start or lazily: the demo's PGlite, the tracing SDK) is one of them.
    const overlap = Object.keys(pkg.dependencies).filter((d) => d in repoPackage.devDependencies);
    expect(overlap).toEqual([]);
    const builtins = new Set(builtinModules);
    const imported = new Set(
      walk(join(installed, 'dist'))
        .filter((p) => p.endsWith('.js'))
        .flatMap((p) => bareImports(readFileSync(join(installed, 'dist', p), 'utf8')))
        .map(packageName)
        .filter((n) => !builtins.has(n)),
    );
    expect([...imported].filter((n) => !(n in pkg.dependencies))).toEqual([]);
    expect(imported).toContain('@electric-sql/pglite');
  });
});

describe('the installed package, from an empty directory', () => {
  it('tells its version: `npx timeout-center version`, --version on the installed bin, VERSION to an importing service', () => {
    // (`npx timeout-center --version` prints npm's own version: npx takes --version for itself.)
    const verb = run('npx', ['--no', 'timeout-center', 'version'], app, 60_000);
    expect(verb.status, output(verb)).toBe(0);
    expect(verb.stdout).toBe(`${repoPackage.version}\n`);
    const flag = run(join(app, 'node_modules', '.bin', 'timeout-center'), ['--version'], app, 60_000);
    expect(flag.status, output(flag)).toBe(0);
    expect(flag.stdout).toBe(`${repoPackage.version}\n`);
    // And to a Node service that imports the library (the package's main export).
    const imported = run(
      process.execPath,
      ['--input-type=module', '-e', "import { VERSION, schedule } from 'timeout-center'; console.log(VERSION, typeof schedule)"],
      app,
      60_000,
    );
    expect(imported.status, output(imported)).toBe(0);
    expect(imported.stdout).toBe(`${repoPackage.version} function\n`);
  });

  it('npx timeout-center demo closes every unpaid order on Node alone (embedded PostgreSQL, in-process channel)', () => {
    // Short: 200 orders due over 1 s (the default 3,000 over 10 s shows the same path).
    const r = run('npx', ['--no', 'timeout-center', 'demo', '--orders', '200', '--spread', '1', '--json'], app, 240_000);
    expect(r.status, output(r)).toBe(0);
    const summary = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as {
      summary: { ok: boolean; total: number; closed: number; paidOrders: number; failed: number };
    };
    expect(summary.summary).toMatchObject({ ok: true, total: 200, failed: 0 });
    expect(summary.summary.closed).toBe(200 - summary.summary.paidOrders);
    expect(existsSync(join(app, '.demo-data')), 'the embedded database lives in the working directory').toBe(true);
  }, 300_000);

  it('npx timeout-center migrate, then run: orders scheduled with the README SQL are closed; SIGTERM drains and stops it', async () => {
    db = await createTestDatabase('release', { empty: true });
    const config = writeConfig({ redisKeyPrefix: testKeyPrefix('release'), kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    const env = cleanEnv({ DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL });
    const migrated = run('npx', ['--no', 'timeout-center', 'migrate', '-c', config, '--no-logs'], app, 120_000, env);
    expect(migrated.status, output(migrated)).toBe(0);
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      await pool.query('CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz)');
      // README section 3's insert as written, due in 2 s instead of 15 minutes.
      const create = namedBlock('create').text;
      const soon = create.replace("interval '15 minutes'", "interval '2 seconds'");
      expect(soon).not.toBe(create);
      const closes = async (order: number) => {
        await pool.query(forOrder(soon, order));
        const closed = await until(async () => (await pool.query(`SELECT status FROM orders WHERE id = $1`, [order])).rows[0]?.status === 'closed', 60_000);
        expect(closed, `order ${order} not closed`).toBe(true);
        const done = await pool.query(`SELECT state, result FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND biz_id = $1`, [String(order)]);
        expect(done.rows).toEqual([{ state: 'done', result: 'applied' }]);
      };

      // Through npx, stopped the way a terminal's Ctrl-C, systemd or `timeout` stop it: the signal
      // goes to the process group. (npm does not pass on a SIGTERM sent to the npx process alone:
      // it exits and leaves the server running, npm/cli#6684; a supervisor that signals one pid
      // runs the bin itself, below.)
      const viaNpx = start('npx', ['--no', 'timeout-center', 'run', '-c', config, '--port', '0'], env);
      await viaNpx.waitForMsg('worker started', 120_000);
      await closes(42);
      process.kill(-viaNpx.pid, 'SIGTERM');
      await viaNpx.waitForMsg('stopped cleanly', 30_000);
      expect(await until(async () => processGroup(viaNpx.pid).length === 0, 15_000), processGroup(viaNpx.pid).join('\n')).toBe(true);

      // The installed bin itself, SIGTERM to its pid: it drains and exits 0.
      const direct = start(join(app, 'node_modules', '.bin', 'timeout-center'), ['run', '-c', config, '--port', '0'], env);
      await direct.waitForMsg('worker started', 120_000);
      await closes(43);
      direct.child.kill('SIGTERM');
      const exited = await Promise.race([direct.exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), 30_000))]);
      expect(exited, `stderr: ${direct.stderr.slice(-2000)}`).toEqual({ code: 0, signal: null });
      expect(direct.lines.some((l) => l.msg === 'stopped cleanly')).toBe(true);
    } finally {
      await pool.end();
    }
  }, 400_000);
});

/** A long-running command from the app directory, in its own process group (the test sees, and
 *  cleans up, npx and the node it starts). */
function start(cmd: string, args: string[], env: NodeJS.ProcessEnv): CliProcess {
  const child = spawn(cmd, args, { cwd: app, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc = new CliProcess(`${cmd} ${args[0]}`, child);
  children.push(proc);
  return proc;
}

async function until(test: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await test()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return test();
}

/** Processes left in a process group. */
function processGroup(pgid: number): string[] {
  try {
    return execFileSync('ps', ['-o', 'pid=,args=', '-g', String(pgid)], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  } catch {
    return []; // ps exits 1 when nothing matches
  }
}
