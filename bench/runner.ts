// Consumer process for the systems that are not timeout-center (which runs through its own CLI):
//   node bench/runner.ts <pure-sql|pg-boss|graphile-worker|bullmq> '<json settings>'
// Prints {"msg":"ready"} once consuming, stops cleanly on SIGTERM. Each one closes orders with
// the same conditional UPDATE as timeout-center's handler (bench/lib/orders.ts).
import pg from 'pg';
import { pureSqlStatement } from './lib/limit.ts';
import { BULL_QUEUE, CLOSE_MANY_SQL, CLOSE_ONE_SQL, KIND, bullConnection, sleep } from './lib/orders.ts';

const [system, json] = process.argv.slice(2);
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each peer system reads its own options
const opts = JSON.parse(json ?? '{}') as Record<string, any>;
const log = (msg: string, extra: Record<string, unknown> = {}) => process.stdout.write(`${JSON.stringify({ msg, ...extra })}\n`);

let stop: () => Promise<void> = async () => {};

/** The pure-SQL limit: N connections, each looping one statement (bench/lib/limit.ts). */
async function pureSql() {
  const statement = pureSqlStatement(opts['form'] === 'array' ? 'array' : 'in', KIND, opts['schema'] === 'minimal' ? 'minimal' : 'ours');
  const pool = new pg.Pool({ connectionString: opts['databaseUrl'], max: opts['connections'] });
  pool.on('error', () => {});
  let running = true;
  const loops = Array.from({ length: opts['connections'] as number }, async () => {
    while (running) {
      const { rows } = await pool.query<{ n: number }>(statement, [opts['limit']]);
      if (rows[0]!.n === 0) await sleep(10);
    }
  });
  stop = async () => {
    running = false;
    await Promise.all(loops);
    await pool.end();
  };
}

async function pgBoss() {
  const { PgBoss } = await import('pg-boss');
  const boss = new PgBoss({ connectionString: opts['databaseUrl'], max: opts['poolMax'] });
  boss.on('error', (err) => log('pg-boss error', { err: String(err) }));
  await boss.start();
  const queue = 'close-order';
  const common = {
    batchSize: opts['batchSize'] as number,
    localConcurrency: opts['localConcurrency'] as number,
    pollingIntervalSeconds: opts['pollingIntervalSeconds'] as number,
    ...(opts['batchSize'] > 1 ? { burstWhenBatchFull: true } : {}),
  };
  if (opts['transactional']) {
    // The close commits together with the jobs' completion (what timeout-center does per shard).
    const options = { ...common, transactional: true } as const;
    await boss.work<{ id: number }, unknown, typeof options>(queue, options, async (jobs, tx) => {
      if (jobs.length === 1) await tx.executeSql(CLOSE_ONE_SQL, [jobs[0]!.data.id]);
      else await tx.executeSql(CLOSE_MANY_SQL, [jobs.map((j) => j.data.id)]);
    });
  } else if (opts['perJob']) {
    // One UPDATE per job (the usual shape of a job handler), jobs fetched and completed in batches.
    const pool = new pg.Pool({ connectionString: opts['databaseUrl'], max: opts['perJobConnections'] });
    await boss.work<{ id: number }>(queue, common, async (jobs) => {
      await Promise.all(jobs.map((j) => pool.query(CLOSE_ONE_SQL, [j.data.id])));
    });
  } else {
    const pool = new pg.Pool({ connectionString: opts['databaseUrl'], max: opts['localConcurrency'] });
    await boss.work<{ id: number }>(queue, common, async (jobs) => {
      await pool.query(CLOSE_MANY_SQL, [jobs.map((j) => j.data.id)]);
    });
  }
  stop = async () => {
    await boss.stop({ graceful: true, timeout: 15_000 });
  };
}

async function graphileWorker() {
  const { run } = await import('graphile-worker');
  const runner = await run({
    connectionString: opts['databaseUrl'],
    concurrency: opts['concurrency'],
    maxPoolSize: opts['maxPoolSize'],
    pollInterval: opts['pollInterval'],
    noHandleSignals: true,
    taskList: {
      close_order: async (payload, helpers) => {
        await helpers.query(CLOSE_ONE_SQL, [(payload as { id: number }).id]);
      },
    },
    preset: {
      worker: {
        ...(opts['localQueueSize'] > 1 ? { localQueue: { size: opts['localQueueSize'] as number } } : {}),
        completeJobBatchDelay: opts['completeJobBatchDelay'],
      },
    },
    logger: new (await import('graphile-worker')).Logger(() => (level: string, message: string) => {
      if (level === 'error' || level === 'warning') log(`graphile-worker ${level}: ${message}`);
    }),
  });
  stop = () => runner.stop();
}

async function bullmq() {
  const { Worker } = await import('bullmq');
  const pool = new pg.Pool({ connectionString: opts['databaseUrl'], max: opts['poolMax'] });
  const worker = new Worker(
    BULL_QUEUE,
    async (job) => {
      await pool.query(CLOSE_ONE_SQL, [(job.data as { id: number }).id]);
    },
    { connection: bullConnection(opts['redisUrl']), prefix: opts['prefix'], concurrency: opts['concurrency'] },
  );
  worker.on('error', (err) => log('bullmq error', { err: String(err) }));
  await worker.waitUntilReady();
  stop = async () => {
    await worker.close();
    await pool.end();
  };
}

const starters: Record<string, () => Promise<void>> = {
  'pure-sql': pureSql,
  'pg-boss': pgBoss,
  'graphile-worker': graphileWorker,
  bullmq,
};

const start = starters[system ?? ''];
if (!start) {
  process.stderr.write(`runner: unknown system "${system}"; one of ${Object.keys(starters).join(', ')}\n`);
  process.exit(2);
}
let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) process.exit(1);
  stopping = true;
  stop().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`runner: stop failed: ${String(err)}\n`);
      process.exit(1);
    },
  );
});
start().then(
  () => log('ready'),
  (err: unknown) => {
    process.stderr.write(`runner: ${system} failed to start: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
