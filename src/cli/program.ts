// timeout-center: one command per verb (started by main.ts). Errors go to stderr as one readable line (what happened,
// what to do) and a non-zero exit; logs go to stdout as JSON lines.
import { Command, CommanderError, Option } from 'commander';
import { loadConfig, type LoadedConfig } from '../config.js';
import { createLogger, type Logger } from '../observability/logger.js';
import type { Runtime } from '../runtime.js';
import { configOption } from './commands/common.js';
import { registerMigrate } from './commands/migrate.js';
import { EXIT, EXIT_CODES_HELP, exitCodeOf } from './exit-codes.js';
import { registerDemo } from './commands/demo.js';
import { registerGenerate } from './commands/generate.js';
import { registerCancel } from './commands/cancel.js';
import { addConsoleOptions, consoleService, registerConsole, type ServeConsoleOpts } from './commands/console.js';
import { addApiOptions, apiService, registerApi, type ServeApiOpts } from './commands/api.js';
import { registerFailed } from './commands/failed.js';
import { registerFlow } from './commands/flow.js';
import { registerPurge } from './commands/purge.js';
import { registerRetry } from './commands/retry.js';
import { registerScans } from './commands/scans.js';
import { registerShards } from './commands/shards.js';
import { registerStatus } from './commands/status.js';
import { VERSION } from '../version.js';

const program = new Command();
program
  .name('timeout-center')
  .version(VERSION, '-V, --version', 'print the version of timeout-center and exit')
  .description(
    'Batch-scan timeout center: deadlines live as rows in PostgreSQL (timeout_center.timeouts); a coordinator\n' +
      'claims what is due into shards, workers apply each shard as one UPDATE.\n\n' +
      'Connections come from DATABASE_URL and REDIS_URL; kinds, handlers and stores from -c/--config (or TIMEOUT_CENTER_CONFIG),\n' +
      'which every verb takes.',
  )
  .showHelpAfterError('(run with --help for usage)')
  .addHelpText('afterAll', `\n${EXIT_CODES_HELP}\n`)
  .exitOverride();
const portOption = () => new Option('-p, --port <port>', 'serve /metrics, /healthz, /readyz on this port (0 = any free port)').argParser(parsePort);

function parsePort(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new CommanderError(2, 'tc.port', `--port must be 0..65535, got "${value}"`);
  return n;
}

function load(opts: { config?: string; port?: number; concurrency?: number }): { config: LoadedConfig; logger: Logger } {
  // Flags go through the config schema with the file (bounds, cross-field checks).
  const config = loadConfig({
    path: opts.config,
    overrides: {
      ...(opts.port !== undefined ? { httpPort: opts.port } : {}),
      ...(opts.concurrency !== undefined ? { worker: { concurrency: opts.concurrency } } : {}),
    },
  });
  return { config, logger: createLogger(config.logLevel) };
}

registerMigrate(program);

function serve(role: 'coordinator' | 'worker' | 'run', description: string) {
  const cmd = program.command(role).description(description).addOption(portOption());
  if (role !== 'coordinator') {
    cmd.addOption(new Option('--concurrency <n>', 'shards run at once by the worker').argParser((v) => positiveInt(v, '--concurrency')));
  }
  addConsoleOptions(cmd);
  addApiOptions(cmd);
  cmd.action(async (opts: { config?: string; port?: number; concurrency?: number } & ServeConsoleOpts & ServeApiOpts) => {
    const { config, logger } = load(opts);
    // Signals are handled from before the start: a SIGTERM while starting stops the process as
    // soon as the start completes (drained, leadership released), not by Node's default exit.
    const untilSignalled = handleShutdownSignals(logger);
    // The console (--console), with its own pool, is one more service of the process.
    const console_ = consoleService(opts, config, logger);
    // The HTTP API (--api), with its own pools, likewise.
    const api = apiService(opts, config, logger);
    // Loaded here: the verbs that only read or write the database start without the engine.
    const { startRuntime } = await import('../runtime.js');
    const runtime = await startRuntime({
      config,
      logger,
      coordinator: role !== 'worker',
      worker: role !== 'coordinator',
      services: [console_, api].filter((s) => s !== undefined),
      // Migrated past what this version runs: stop (drained) and exit 3, so the orchestrator
      // shows a failing process instead of one that answers its probes and closes nothing.
      onIncompatibleSchema: () => {
        void runtime.stop().finally(() => process.exit(EXIT.unavailable));
      },
    });
    await untilSignalled(runtime);
  });
}

function positiveInt(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new CommanderError(2, 'tc.int', `${flag} must be a positive integer, got "${value}"`);
  return n;
}

serve('coordinator', 'run the coordinator: leader election, scans (map), recovery (reaper) and reduce; run two for a standby');
serve('worker', 'run a worker: read shards from Redis and apply each as one batch');
serve('run', 'run a coordinator and a worker in one process (single machine)');

// Trying it: the one-process demo (embedded PostgreSQL when DATABASE_URL is unset), and the order
// generator that feeds the compose fleet.
registerDemo(program);
registerGenerate(program);
registerConsole(program);
registerApi(program);

// Operator verbs: read the SQL views (and retry / cancel / purge); DATABASE_URL is all they need.
for (const register of [registerStatus, registerScans, registerShards, registerFailed, registerRetry, registerCancel, registerPurge]) {
  register(program);
}
// Flow control: pause, resume, limit (audited; fleet-wide within a tick).
registerFlow(program);
// Also a verb: `npx timeout-center --version` prints npm's own version (npx takes --version for
// itself), `npx timeout-center version` this package's.
program
  .command('version')
  .description('print the version of timeout-center (as --version does)')
  .action(() => {
    process.stdout.write(`${VERSION}\n`);
  });

// Every verb takes -c/--config (TIMEOUT_CENTER_CONFIG) from this one definition, reads it the same
// way (commands/common.ts readConfig), and fails on bad usage with exit 2 (exit-codes.ts).
// `version` reads nothing: it prints this build's version.
for (const cmd of program.commands) {
  if (cmd.name() !== 'version' && !cmd.options.some((o) => o.attributeName() === 'config')) cmd.addOption(configOption());
}

/**
 * First SIGTERM/SIGINT drains and exits 0; a second one forces exit 1. Installs the handlers now;
 * the returned function hands over the runtime once it has started (a signal that came earlier
 * stops it at once then).
 */
function handleShutdownSignals(logger: Logger): (runtime: Runtime) => Promise<never> {
  let signals = 0;
  let runtime: Runtime | undefined;
  let requested: NodeJS.Signals | undefined;
  const stop = (rt: Runtime, signal: NodeJS.Signals) => {
    logger.info({ signal }, 'stopping: no new shards; draining the running ones (send the signal again to force)');
    rt.stop().then(
      () => {
        logger.info('stopped cleanly');
        process.exit(0);
      },
      (err: unknown) => {
        logger.error({ err }, 'stop failed');
        process.exit(1);
      },
    );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: exiting now without draining');
      process.exit(1);
    }
    if (runtime) stop(runtime, signal);
    else {
      requested = signal;
      logger.info({ signal }, 'stopping: the signal came while starting; stopping as soon as the start completes (send it again to force)');
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return (rt) =>
    new Promise<never>(() => {
      runtime = rt;
      if (requested) stop(rt, requested);
    });
}

/** Runs the verb argv names, then exits with the code of the table (exit-codes.ts) on error. */
export async function main(argv: string[]): Promise<void> {
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help') process.exit(EXIT.ok);
      // Commander printed its own usage errors; ours (tc.*) are printed here.
      if (err.code.startsWith('tc.')) process.stderr.write(`timeout-center: ${err.message}\n`);
      process.exit(exitCodeOf(err));
    }
    // One line (what happened, what to do) and the code of the table: 2 bad input, 3 unavailable,
    // 4 unexpected.
    const code = exitCodeOf(err);
    const message = (err as Error).message ?? String(err);
    process.stderr.write(`timeout-center: ${code === EXIT.unexpected ? `unexpected error (please report it): ${message}` : message}\n`);
    process.exit(code);
  }
}
