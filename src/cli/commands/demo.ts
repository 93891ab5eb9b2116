// `timeout-center demo` (also `npm run demo`): the pipeline end to end in one process. With no
// DATABASE_URL / REDIS_URL it needs nothing but Node: embedded PostgreSQL (PGlite) and an
// in-process shard channel. See src/demo/demo.ts.
import { CommanderError, Option, type Command } from 'commander';
import { readConfig } from './common.js';

function intIn(flag: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) throw new CommanderError(2, 'tc.input', `${flag} must be an integer from ${min} to ${max}, got "${value}"`);
    return n;
  };
}

export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description('try it with Node alone: seed orders due over the next seconds, close the unpaid ones live, print a summary')
    .addHelpText(
      'after',
      '\nWithout DATABASE_URL it uses an embedded PostgreSQL (PGlite, data kept in --data-dir); without REDIS_URL an\n' +
        'in-process shard channel and a local leader lock. With them set it uses the real services: give it a\n' +
        "database of its own (its coordinator takes the database's coordinator lease). Exits 0 when every unpaid\n" +
        'order of the run was closed and no timeout failed.',
    )
    .option('--orders <n>', 'orders to seed', intIn('--orders', 1, 1_000_000), 3000)
    .option('--spread <seconds>', 'timeouts fall due evenly over this many seconds', intIn('--spread', 0, 3600), 10)
    .option('--paid <percent>', 'percent of orders already paid (their close is skipped)', intIn('--paid', 0, 100), 10)
    .option('--shard-size <n>', 'timeouts per shard (one UPDATE each)', intIn('--shard-size', 1, 100_000), 250)
    .option('--concurrency <n>', 'shards the worker runs at once', intIn('--concurrency', 1, 64), 4)
    .option('--data-dir <dir>', 'folder of the embedded PostgreSQL (when DATABASE_URL is not set)', '.demo-data')
    .option('--grace <seconds>', 'fail when not finished this long after the last timeout fell due', intIn('--grace', 1, 3600), 60)
    .option('--json', 'also print the summary as one JSON line')
    .addOption(new Option('--database-url <url>', 'PostgreSQL to use instead of the embedded one').env('DATABASE_URL'))
    .addOption(new Option('--redis-url <url>', 'Redis to use instead of the in-process channel').env('REDIS_URL'))
    .option('--redis-prefix <prefix>', 'Redis key prefix (with --redis-url)', 'tc-demo')
    .action(
      async (
        opts: {
          orders: number;
          spread: number;
          paid: number;
          shardSize: number;
          concurrency: number;
          dataDir: string;
          grace: number;
          json?: boolean;
          databaseUrl?: string;
          redisUrl?: string;
          redisPrefix: string;
          config?: string;
        },
        cmd: Command,
      ) => {
        // With -c/--config: its database, Redis and key prefix instead of the embedded ones (the
        // flags still win).
        const config = readConfig(opts);
        if (config) {
          opts.databaseUrl ||= config.databaseUrl;
          opts.redisUrl ||= config.redisUrl || undefined;
          if (cmd.getOptionValueSource('redisPrefix') !== 'cli') opts.redisPrefix = config.redisKeyPrefix;
        }
        // First Ctrl-C: stop at the next progress check and clean up; a second one exits at once.
        const controller = new AbortController();
        const onSignal = () => {
          if (controller.signal.aborted) process.exit(130);
          controller.abort();
        };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
        // The reader went away (`demo | head`): stop and clean up instead of dying on EPIPE.
        const onStdoutError = (err: NodeJS.ErrnoException) => {
          if (err.code !== 'EPIPE') throw err;
          controller.abort();
        };
        process.stdout.on('error', onStdoutError);
        // Loaded here, not at the top: the demo brings the whole engine (and PGlite), which the
        // other verbs do not need to start.
        const { DemoError, runDemo } = await import('../../demo/demo.js');
        try {
          const summary = await runDemo(
            {
              orders: opts.orders,
              spreadSeconds: opts.spread,
              paidPercent: opts.paid,
              shardSize: opts.shardSize,
              concurrency: opts.concurrency,
              dataDir: opts.dataDir,
              databaseUrl: opts.databaseUrl || undefined,
              redisUrl: opts.redisUrl || undefined,
              redisKeyPrefix: opts.redisPrefix,
              graceSeconds: opts.grace,
              out: process.stdout,
              json: Boolean(opts.json),
              logLevel: (process.env['LOG_LEVEL'] as 'info' | undefined) ?? 'warn',
            },
            controller.signal,
          );
          process.exitCode = summary.ok ? 0 : 1;
        } catch (err) {
          if (err instanceof DemoError) throw new CommanderError(controller.signal.aborted ? 130 : 1, 'tc.demo', `demo: ${err.message}`);
          throw err;
        } finally {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
          process.stdout.off('error', onStdoutError);
        }
      },
    );
}
