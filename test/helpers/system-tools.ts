// System tools (not npm packages) that some tests drive; .ci/run installs them with apt-get. On a
// machine with only PostgreSQL and Redis, a test that needs a missing one is skipped, named as
// such, and the run ends with one line naming the tools and the command that installs them
// (global-setup.ts prints it from what the test files recorded). Under CI a missing tool fails
// the test instead, so CI cannot go green by skipping.
import { spawnSync } from 'node:child_process';
import { accessSync, appendFileSync, constants, existsSync, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';

export type Tool =
  'faketime' | 'chromium' | 'docker-compose' | 'kubectl' | 'redis-cluster' | 'redis-sentinel' | 'script' | 'pg-auto-failover' | 'curl' | 'citus';
type Argv = [string, ...string[]];

interface ToolSpec {
  /** The Debian package that installs it (the one .ci/run installs). */
  readonly pkg: string;
  /** How a test runs it here (a library path, an executable, an argv prefix), or undefined. */
  readonly locate: () => Argv | undefined;
  /** How to get it when no Debian package carries it (the summary line prints this instead). */
  readonly install?: string;
}

/** Set by global-setup.ts: test files append the tools they skipped on, one per line. Test files run
 *  in worker processes, so a file is what reaches the teardown. */
export const SKIPPED_TOOLS_FILE_ENV = 'TC_SKIPPED_TOOLS_FILE';

/** Any CI value but empty, 0 or false (GitHub, GitLab and most runners set CI=true, some CI=1). */
const IN_CI = /^(?!0$|false$)./i.test(process.env['CI'] ?? '');

function onPath(command: string): string | undefined {
  for (const dir of (process.env['PATH'] ?? '').split(delimiter).filter(Boolean)) {
    const file = join(dir, command);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

const answers = (cmd: string, args: string[]): boolean => {
  const r = spawnSync(cmd, args, { stdio: 'ignore', timeout: 30_000 });
  return r.status === 0 && !r.error;
};

/** libfaketime's multithreaded build: /usr/lib/<multiarch triplet>/faketime on Debian. */
function libfaketime(): string | undefined {
  const triplets = existsSync('/usr/lib') ? readdirSync('/usr/lib').filter((d) => d.endsWith('-linux-gnu')) : [];
  return [...triplets.map((t) => `/usr/lib/${t}/faketime`), '/usr/lib/faketime'].map((dir) => `${dir}/libfaketimeMT.so.1`).find((p) => existsSync(p));
}

// In the order the summary line names them.
const TOOLS: Record<Tool, ToolSpec> = {
  faketime: {
    pkg: 'faketime',
    locate: () => {
      const lib = libfaketime();
      return lib ? [lib] : undefined;
    },
  },
  chromium: {
    pkg: 'chromium',
    locate: () => {
      const explicit = process.env['CHROMIUM_PATH'];
      const path = explicit ? (existsSync(explicit) ? explicit : undefined) : onPath('chromium');
      return path ? [path] : undefined;
    },
  },
  // The v2 plugin when it works without an engine, else Debian's v1 `docker-compose`.
  'docker-compose': {
    pkg: 'docker-compose',
    locate: () => (answers('docker', ['compose', 'version']) ? ['docker', 'compose'] : answers('docker-compose', ['version']) ? ['docker-compose'] : undefined),
  },
  kubectl: { pkg: 'kubernetes-client', locate: () => (answers('kubectl', ['version', '--client']) ? ['kubectl'] : undefined) },
  // redis-server in cluster mode and `redis-cli --cluster create` (redis-tools, beside redis-server).
  'redis-cluster': {
    pkg: 'redis-server redis-tools',
    locate: () => {
      // `redis-cli --cluster help` prints its commands but exits 1.
      const help = spawnSync('redis-cli', ['--cluster', 'help'], { encoding: 'utf8', timeout: 30_000 });
      return onPath('redis-server') && /create\s+host1:port1/.test(`${help.stdout}${help.stderr}`) ? ['redis-cli', '--cluster'] : undefined;
    },
  },
  // Sentinel is redis-server with --sentinel; Debian's redis-sentinel package adds only a service.
  'redis-sentinel': { pkg: 'redis-server', locate: () => (onPath('redis-server') ? ['redis-server', '--sentinel'] : undefined) },
  // pg_auto_failover's monitor and keeper (test/faults/pg-auto-failover.test.ts), built for the server's PostgreSQL 15.
  'pg-auto-failover': { pkg: 'postgresql-15-auto-failover', locate: () => (answers('pg_autoctl', ['--version']) ? ['pg_autoctl'] : undefined) },
  // util-linux's `script`: runs a command on a pseudo-terminal (what a person at a shell sees).
  script: { pkg: 'bsdutils', locate: () => (onPath('script') ? ['script'] : undefined) },
  curl: { pkg: 'curl', locate: () => (onPath('curl') ? ['curl'] : undefined) },
  // Citus 12.1 (the last line for PostgreSQL 15) built into the machine's PostgreSQL: no Debian
  // package carries it; ../shared/citus/build.sh builds it from the source beside it (.ci/run does).
  citus: {
    pkg: 'citus',
    install: 'bash ../shared/citus/build.sh (as root: builds Citus 12.1 from source into PostgreSQL 15)',
    locate: () => {
      const lib = '/usr/lib/postgresql/15/lib/citus.so';
      return existsSync(lib) && existsSync('/usr/share/postgresql/15/extension/citus.control') ? [lib] : undefined;
    },
  },
};

const located = new Map<Tool, Argv | undefined>();
function locate(tool: Tool): Argv | undefined {
  if (!located.has(tool)) located.set(tool, TOOLS[tool].locate());
  return located.get(tool);
}

const installCommand = (tools: readonly Tool[]): string => {
  const apt = tools.filter((t) => !TOOLS[t].install);
  const other = tools.flatMap((t) => TOOLS[t].install ?? []);
  return [...(apt.length ? [`sudo apt-get install -y ${apt.map((t) => TOOLS[t].pkg).join(' ')}`] : []), ...other].join('; ');
};

export interface Requirement {
  /** A needed tool is missing (outside CI): skip. */
  readonly skip: boolean;
  /** Why, e.g. "needs faketime (not installed)"; empty when nothing is missing. */
  readonly reason: string;
  /** The test or suite name, with the reason appended when skipped, so the report says why. */
  title(name: string): string;
}

/**
 * Declares the system tools a test needs: `describe.skipIf(r.skip)(r.title('...'), ...)` at
 * collection, or `ctx.skip(r.skip, r.reason)` inside a test. Outside CI a missing tool is recorded
 * for the run's summary line; under CI it throws (naming the tool and its install command), failing
 * the file when called at collection, or the test when called inside it.
 */
export function requireTools(...tools: Tool[]): Requirement {
  const missing = tools.filter((t) => !locate(t));
  const reason = missing.length > 0 ? `needs ${missing.join(', ')} (not installed)` : '';
  if (reason && IN_CI) {
    throw new Error(`${reason}; under CI=${process.env['CI']} that fails instead of skipping. Install: ${installCommand(missing)} (.ci/run does)`);
  }
  const file = process.env[SKIPPED_TOOLS_FILE_ENV];
  if (reason && file) appendFileSync(file, missing.map((t) => `${t}\n`).join(''));
  return { skip: missing.length > 0, reason, title: (name) => (reason ? `${name} [skipped: ${reason}]` : name) };
}

/** What a test runs for a tool it required: the library or executable path, or the argv prefix. */
export function toolCommand(tool: Tool): Argv {
  const found = locate(tool);
  if (!found) throw new Error(`${tool} is not installed: check requireTools('${tool}').skip before using it`);
  return found;
}

/** The run's one summary line from the recorded file, or undefined when no test skipped. */
export function skippedToolsLine(file: string): string | undefined {
  const recorded = existsSync(file) ? new Set(readFileSync(file, 'utf8').split('\n')) : new Set<string>();
  const missing = (Object.keys(TOOLS) as Tool[]).filter((t) => recorded.has(t));
  if (missing.length === 0) return undefined;
  return `skipped tests that need: ${missing.join(', ')} — install them with: ${installCommand(missing)}`;
}
