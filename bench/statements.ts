// npm run bench:statements [-- options]: the statements alone, without processes, Redis or a
// coordinator. N due timeouts (90 % unpaid orders) are drained by C connections looping one
// transaction, for each variant on a fresh database of the bench's own PostgreSQL (bench/lib/server.ts);
// prints timeouts/s per variant. It separates
// what a statement costs from what the pipeline around it costs (bench/run.ts measures both).
//
//   --n <count>          timeouts (default 200,000)
//   --k <rows>           rows per statement / shard (default 5000)
//   --connections <c>    connections looping at once (default 2)
//   --only <names>       variants, comma separated (default all):
//       minimal-in       the pure-SQL limit on the minimal schema (one timeouts table, one partial
//                        index; bench/lib/limit.ts): id IN (SELECT ... SKIP LOCKED)
//       minimal-array    the same with id = ANY (ARRAY(SELECT ...)): primary-key probes
//       limit-in         the limit on our schema (timeout_center.timeouts), IN spelling
//       limit-array      the limit on our schema, ARRAY spelling
//       worker-batch     the worker's claim.sql, batch form: claim + SQL handler + result, one statement
//       worker-plain     claim.sql plain form (locks), then the handler as its own statement with
//                        the ids passed back from JavaScript, then finish.sql's one write per row
//   --help               this text
import { parseArgs } from 'node:util';
import pg from 'pg';
// dist/: npm run bench:statements builds first, and src/ cannot be loaded without compiling.
import { sql, statementValues } from '../dist/db/queries.js';
import { batchSqlHandler } from '../dist/worker/sql-handler.js';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { pureSqlStatement } from './lib/limit.ts';
import { dueDatabase } from './lib/due-database.ts';
import { drainLoop, expectDrained } from './lib/drain-loop.ts';
import { CLOSE_MANY_SQL, KIND } from './lib/orders.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    k: { type: 'string' },
    connections: { type: 'string' },
    only: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const usage = (message: string): never => failUsage('bench:statements', message);
const { n: N, k: K, connections: C } = positiveCounts('bench:statements', args, { n: 200_000, k: 5000, connections: 2 });
const VARIANTS = ['minimal-in', 'minimal-array', 'limit-in', 'limit-array', 'worker-batch', 'worker-plain'];
const names = args.only ? args.only.split(',').map((s) => s.trim()) : VARIANTS;
const unknown = names.filter((n) => !VARIANTS.includes(n));
if (unknown.length > 0) usage(`unknown variant(s) ${unknown.join(', ')}; known: ${VARIANTS.join(', ')}`);

/** Every column as PostgreSQL's text, as the worker reads claim.sql. */
const AS_TEXT = { getTypeParser: () => (value: string) => value };

type Step = (client: pg.PoolClient, shard: number) => Promise<number>;

async function variants(pool: pg.Pool): Promise<Record<string, Step>> {
  const batch = await batchSqlHandler(pool, CLOSE_MANY_SQL, 60_000);
  if (!batch) throw new Error('the close statement has no batch form; see src/worker/sql-handler.ts');
  return {
    'minimal-in': async (c) => (await c.query(pureSqlStatement('in', KIND, 'minimal'), [K])).rows[0].n,
    'minimal-array': async (c) => (await c.query(pureSqlStatement('array', KIND, 'minimal'), [K])).rows[0].n,
    'limit-in': async (c) => (await c.query(pureSqlStatement('in', KIND), [K])).rows[0].n,
    'limit-array': async (c) => (await c.query(pureSqlStatement('array', KIND), [K])).rows[0].n,
    'worker-batch': async (c, shard) => {
      await c.query('BEGIN');
      const { rows } = await c.query({
        text: batch.sql,
        values: statementValues('worker/claim', { shardId: shard, kind: KIND, claimLimit: K, batch: true }),
        types: AS_TEXT,
      });
      await c.query('COMMIT');
      return Number(rows[0].n);
    },
    'worker-plain': async (c, shard) => {
      await c.query('BEGIN');
      const { rows } = await c.query({ ...sql('worker/claim', { shardId: shard, kind: KIND, claimLimit: K, batch: false }), types: AS_TEXT });
      const applied = await c.query({ text: CLOSE_MANY_SQL, values: [rows[0].biz_ids], rowMode: 'array', types: AS_TEXT });
      const ids = pg.types.getTypeParser(1016 as Parameters<typeof pg.types.getTypeParser>[0])(rows[0].ids) as string[];
      const bizIds = pg.types.getTypeParser(1009 as Parameters<typeof pg.types.getTypeParser>[0])(rows[0].biz_ids) as string[];
      const done = new Set((applied.rows as unknown as string[][]).map((r) => r[0]));
      const skipped = ids.filter((_, i) => !done.has(bizIds[i]!));
      // finish.sql writes each claimed row once (moved to done_timeouts); no shard row here.
      await c.query(
        sql('worker/finish', {
          shardId: shard,
          skipped,
          failed: [],
          errors: [],
          permanent: [],
          maxAttempts: 5,
          backoffMs: 1000,
          claimed: ids.length,
          skippedMarked: 0,
          claimedIds: ids,
        }),
      );
      await c.query('COMMIT');
      return Number(rows[0].n);
    },
  };
}

async function main(): Promise<void> {
  // The same PostgreSQL settings as npm run bench (its own instance; BENCH_DATABASE_URL to use another).
  const server = await startBenchServer();
  try {
    await drain(server);
  } finally {
    await server.stop();
  }
}

async function drain(server: BenchServer): Promise<void> {
  console.log(`${N.toLocaleString('en')} timeouts, ${K.toLocaleString('en')} per statement, ${C} connections`);
  for (const name of names) {
    const { pool, drop } = await dueDatabase(server, {
      label: 'bench_statements',
      n: N,
      schema: name.startsWith('minimal-') ? 'minimal' : 'ours',
      shardSize: K,
      poolMax: C + 1,
    });
    try {
      const step = (await variants(pool))[name]!;
      const { total, seconds } = await drainLoop(pool, C, step);
      await expectDrained(pool, name, N, total);
      console.log(
        `${name.padEnd(13)} ${Math.round(total / seconds)
          .toLocaleString('en')
          .padStart(9)} timeouts/s  (${seconds.toFixed(2)} s)`,
      );
    } finally {
      await drop();
    }
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
