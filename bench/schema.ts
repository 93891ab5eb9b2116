// npm run bench:schema [-- options]: what each part of a timeouts table costs the drain. The
// pure-SQL limit statement (claim k due rows SKIP LOCKED, mark them done, close their unpaid
// orders; bench/lib/limit.ts) runs on a series of tables that go from the minimal schema to ours
// one difference at a time, on the bench's own PostgreSQL (bench/lib/server.ts), interleaved over
// rounds. Prints the median timeouts/s and the WAL bytes per timeout of each, and its ratio to the
// minimal table: the difference between two neighbours is what that one change costs.
//
//   --n <count>          timeouts (default 200,000)
//   --k <rows>           rows per statement (default 5000)
//   --connections <c>    connections looping at once (default 2)
//   --rounds <r>         interleaved rounds (default 3)
//   --only <names>       variants, comma separated (default all; see VARIANTS below)
//   --help               this text
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
// dist/: npm run bench:schema builds first.
import { migrate } from '../dist/db/migrate.js';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { drainLoop, expectDrained } from './lib/drain-loop.ts';
import { migrationsBefore } from './lib/migrations.ts';
import { insertOrders, KIND, ORDERS_DDL } from './lib/orders.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    k: { type: 'string' },
    connections: { type: 'string' },
    rounds: { type: 'string' },
    only: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const usage = (message: string): never => failUsage('bench:schema', message);
const { n: N, k: K, connections: C, rounds: ROUNDS } = positiveCounts('bench:schema', args, { n: 200_000, k: 5000, connections: 2, rounds: 3 });

/** One table to drain: how to build and fill it, and the limit statement on it ($1 = k). */
interface Variant {
  name: string;
  what: string;
  setup: (pool: pg.Pool) => Promise<void>;
  statement: string;
}

const CLOSE = `UPDATE orders SET status = 'closed', closed_at = clock_timestamp(), closes = closes + 1`;

function limit(o: { table: string; kindFilter: string; due: string; set: string; biz: string }): string {
  return `
WITH due AS (
  UPDATE ${o.table} t SET ${o.set}
   WHERE t.id = ANY (ARRAY(SELECT id FROM ${o.table} WHERE ${o.kindFilter} state = 'pending' AND ${o.due} <= now()
                            ORDER BY ${o.due} LIMIT $1 FOR UPDATE SKIP LOCKED))
  RETURNING t.biz_id
), closed AS (
  ${CLOSE} WHERE id IN (SELECT ${o.biz} FROM due) AND status = 'unpaid' RETURNING id
)
SELECT (SELECT count(*) FROM due)::int AS n`;
}

const minimalTable = (cols: string, index: string) => async (pool: pg.Pool) => {
  await pool.query(`CREATE TABLE timeouts (id bigserial PRIMARY KEY, ${cols}); ${index}`);
};

const OURS = { table: 'timeout_center.timeouts', kindFilter: `kind = '${KIND}' AND`, due: 'available_at', biz: 'biz_id::bigint' };
const OURS_SET = `state = 'done', result = 'applied', attempts = t.attempts + 1, finished_at = clock_timestamp(), shard_id = 1`;

async function ours(pool: pg.Pool): Promise<void> {
  await migrate(pool, pino({ level: 'silent' }));
  await pool.query(`INSERT INTO timeout_center.kinds (kind) VALUES ($1)`, [KIND]);
}

/** Our schema before sql/0017: kind text, the columns in 0001's order. */
async function oursBefore0017(pool: pg.Pool): Promise<void> {
  await migrate(pool, pino({ level: 'silent' }), migrationsBefore(17));
  await pool.query(`INSERT INTO timeout_center.kinds (kind) VALUES ($1)`, [KIND]);
}

/** The limit on our schema as the worker writes it: the done row moved to the history (sql/0010). */
const OURS_MOVE = `
WITH due AS (
  DELETE FROM timeout_center.timeouts t
   WHERE t.id = ANY (ARRAY(SELECT id FROM timeout_center.timeouts WHERE kind = '${KIND}' AND state = 'pending' AND available_at <= now()
                            ORDER BY available_at LIMIT $1 FOR UPDATE SKIP LOCKED))
  RETURNING t.id, t.kind, t.biz_id, t.due_at, t.payload, t.attempts, t.last_error, t.created_at
), moved AS (
  INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, last_error, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts + 1, 1, 'applied', last_error, created_at, clock_timestamp() FROM due
), closed AS (
  ${CLOSE} WHERE id IN (SELECT biz_id::bigint FROM due) AND status = 'unpaid' RETURNING id
)
SELECT (SELECT count(*) FROM due)::int AS n`;

const VARIANTS: Variant[] = [
  {
    name: 'minimal',
    what: 'id, biz_id bigint, due_at, state; pk + partial index on due_at',
    setup: minimalTable(
      `biz_id bigint NOT NULL, due_at timestamptz NOT NULL, state text NOT NULL DEFAULT 'pending'`,
      `CREATE INDEX ON timeouts (due_at) WHERE state = 'pending'`,
    ),
    statement: limit({ table: 'timeouts', kindFilter: '', due: 'due_at', set: `state = 'done'`, biz: 'biz_id' }),
  },
  {
    name: 'text-biz',
    what: '+ biz_id text (cast to the order id in the close)',
    setup: minimalTable(
      `biz_id text NOT NULL, due_at timestamptz NOT NULL, state text NOT NULL DEFAULT 'pending'`,
      `CREATE INDEX ON timeouts (due_at) WHERE state = 'pending'`,
    ),
    statement: limit({ table: 'timeouts', kindFilter: '', due: 'due_at', set: `state = 'done'`, biz: 'biz_id::bigint' }),
  },
  {
    name: 'kind',
    what: '+ kind text, index on (kind, due_at)',
    setup: minimalTable(
      `kind text NOT NULL, biz_id text NOT NULL, due_at timestamptz NOT NULL, state text NOT NULL DEFAULT 'pending'`,
      `CREATE INDEX ON timeouts (kind, due_at) WHERE state = 'pending'`,
    ),
    statement: limit({ table: 'timeouts', kindFilter: `kind = '${KIND}' AND`, due: 'due_at', set: `state = 'done'`, biz: 'biz_id::bigint' }),
  },
  {
    name: 'wide',
    what: '+ our other columns (payload, available_at, attempts, shard_id, result, last_error, created_at, finished_at), written as we write them',
    setup: minimalTable(
      `kind text NOT NULL, biz_id text NOT NULL, due_at timestamptz NOT NULL, payload jsonb, state text NOT NULL DEFAULT 'pending',
       available_at timestamptz NOT NULL, attempts integer NOT NULL DEFAULT 0, shard_id bigint, result text, last_error text,
       created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz`,
      `CREATE INDEX ON timeouts (kind, available_at) WHERE state = 'pending'`,
    ),
    statement: limit({ table: 'timeouts', kindFilter: `kind = '${KIND}' AND`, due: 'available_at', set: OURS_SET, biz: 'biz_id::bigint' }),
  },
  {
    name: 'wide-split',
    what: 'the wide table, but a done timeout is moved (DELETE ... RETURNING, INSERT) into an append-only history table with its primary key',
    setup: async (pool) => {
      await minimalTable(
        `kind text NOT NULL, biz_id text NOT NULL, due_at timestamptz NOT NULL, payload jsonb, state text NOT NULL DEFAULT 'pending',
         available_at timestamptz NOT NULL, attempts integer NOT NULL DEFAULT 0, shard_id bigint, last_error text,
         created_at timestamptz NOT NULL DEFAULT now()`,
        `CREATE INDEX ON timeouts (kind, available_at) WHERE state = 'pending'`,
      )(pool);
      await pool.query(`CREATE TABLE timeouts_done (id bigint PRIMARY KEY, kind text NOT NULL, biz_id text NOT NULL, due_at timestamptz NOT NULL,
        payload jsonb, attempts integer NOT NULL, shard_id bigint, result text, created_at timestamptz NOT NULL, finished_at timestamptz NOT NULL);
        CREATE INDEX ON timeouts_done USING brin (finished_at)`);
    },
    statement: `
WITH due AS (
  DELETE FROM timeouts t
   WHERE t.id = ANY (ARRAY(SELECT id FROM timeouts WHERE kind = '${KIND}' AND state = 'pending' AND available_at <= now()
                            ORDER BY available_at LIMIT $1 FOR UPDATE SKIP LOCKED))
  RETURNING t.*
), moved AS (
  INSERT INTO timeouts_done (id, kind, biz_id, due_at, payload, attempts, shard_id, result, created_at, finished_at)
  SELECT id, kind, biz_id, due_at, payload, attempts + 1, 1, 'applied', created_at, clock_timestamp() FROM due
), closed AS (
  ${CLOSE} WHERE id IN (SELECT biz_id::bigint FROM due) AND status = 'unpaid' RETURNING id
)
SELECT (SELECT count(*) FROM due)::int AS n`,
  },
  {
    name: 'ours-no-purgeable',
    what: 'ours-update without timeouts_purgeable (the one index a done row updated in place enters besides the pk)',
    setup: async (pool) => {
      await ours(pool);
      await pool.query('DROP INDEX timeout_center.timeouts_purgeable');
    },
    statement: limit({ ...OURS, set: OURS_SET }),
  },
  {
    name: 'ours-pk-due',
    what: 'ours-update with only the primary key and timeouts_due_by_key',
    setup: async (pool) => {
      await ours(pool);
      for (const i of ['timeouts_purgeable', 'timeouts_one_live_per_biz', 'timeouts_in_flight', 'timeouts_failed', 'timeouts_failed_by_shard']) {
        await pool.query(`DROP INDEX timeout_center.${i}`);
      }
    },
    statement: limit({ ...OURS, set: OURS_SET }),
  },
  {
    name: 'ours-no-constraints',
    what: 'ours-update without timeouts_purgeable, its foreign key and CHECKs',
    setup: async (pool) => {
      await ours(pool);
      await pool.query('DROP INDEX timeout_center.timeouts_purgeable');
      const { rows } = await pool.query<{ conname: string }>(
        `SELECT conname FROM pg_constraint WHERE conrelid = 'timeout_center.timeouts'::regclass AND contype IN ('c', 'f')`,
      );
      for (const r of rows) await pool.query(`ALTER TABLE timeout_center.timeouts DROP CONSTRAINT "${r.conname}"`);
    },
    statement: limit({ ...OURS, set: OURS_SET }),
  },
  {
    name: 'ours-update',
    what: 'timeout_center.timeouts as migrated (constraints, foreign key, every index), the done row updated in place (before sql/0010)',
    setup: ours,
    statement: limit({ ...OURS, set: OURS_SET }),
  },
  {
    name: 'ours-history-no-brin',
    what: "ours without the history's BRIN index on finished_at (retention and the console read by it)",
    setup: async (pool) => {
      await ours(pool);
      await pool.query('DROP INDEX timeout_center.done_timeouts_finished');
    },
    statement: OURS_MOVE,
  },
  {
    name: 'ours-history-bare',
    what: 'ours with no index on the history (neither its primary key nor the BRIN index)',
    setup: async (pool) => {
      await ours(pool);
      await pool.query('DROP INDEX timeout_center.done_timeouts_finished');
      await pool.query('ALTER TABLE timeout_center.done_timeouts DROP CONSTRAINT done_timeouts_pkey');
    },
    statement: OURS_MOVE,
  },
  {
    name: 'ours-text-kind',
    what: "ours before sql/0017: kind text (13 bytes for order.unpaid in the row and both kind indexes), columns in 0001's order",
    setup: oursBefore0017,
    statement: OURS_MOVE,
  },
  {
    name: 'ours',
    what: 'timeout_center.timeouts as migrated, the done row moved to timeout_center.done_timeouts (sql/0010; what the worker does)',
    setup: ours,
    statement: OURS_MOVE,
  },
];

const names = args.only ? args.only.split(',').map((s) => s.trim()) : VARIANTS.map((v) => v.name);
const unknown = names.filter((n) => !VARIANTS.some((v) => v.name === n));
if (unknown.length > 0) usage(`unknown variant(s) ${unknown.join(', ')}; known: ${VARIANTS.map((v) => v.name).join(', ')}`);

async function fill(pool: pg.Pool, v: Variant): Promise<void> {
  await pool.query(ORDERS_DDL);
  await insertOrders(pool, 1, N, new Date());
  if (v.name.startsWith('ours')) {
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $2, i::text, now() - interval '1 s' FROM generate_series(1, $1::int) i`,
      [N, KIND],
    );
    return;
  }
  const { rows } = await pool.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns WHERE table_name = 'timeouts' AND table_schema = 'public'`,
  );
  const has = new Set(rows.map((r) => r.column_name));
  const cols = ['biz_id', 'due_at', ...(has.has('kind') ? ['kind'] : []), ...(has.has('available_at') ? ['available_at'] : [])];
  const vals = ['i', `now() - interval '1 s'`, ...(has.has('kind') ? [`'${KIND}'`] : []), ...(has.has('available_at') ? [`now() - interval '1 s'`] : [])];
  await pool.query(`INSERT INTO timeouts (${cols.join(', ')}) SELECT ${vals.join(', ')} FROM generate_series(1, $1::int) i`, [N]);
}

interface Run {
  rate: number;
  walPerTimeout: number;
}

async function once(server: BenchServer, v: Variant): Promise<Run> {
  const db = await server.createDatabase('bench_schema');
  const pool = new pg.Pool({ connectionString: db.url, max: C + 1 });
  pool.on('error', () => {});
  try {
    await v.setup(pool);
    await fill(pool, v);
    await pool.query('VACUUM ANALYZE');
    await pool.query('CHECKPOINT');
    const lsn0 = (await pool.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]!.l;
    const { total, seconds } = await drainLoop(pool, C, async (client) => Number((await client.query(v.statement, [K])).rows[0].n));
    const wal = (await pool.query<{ b: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS b', [lsn0])).rows[0]!.b;
    await expectDrained(pool, v.name, N, total);
    return { rate: total / seconds, walPerTimeout: Number(wal) / N };
  } finally {
    await pool.end();
    await db.drop();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const server = await startBenchServer();
  try {
    const chosen = VARIANTS.filter((v) => names.includes(v.name));
    const runs = new Map<string, Run[]>(chosen.map((v) => [v.name, []]));
    console.log(`${N.toLocaleString('en')} timeouts, k = ${K.toLocaleString('en')}, ${C} connections, ${ROUNDS} interleaved rounds`);
    for (let r = 1; r <= ROUNDS; r++) {
      for (const v of chosen) {
        const run = await once(server, v);
        runs.get(v.name)!.push(run);
        console.log(
          `  round ${r} ${v.name.padEnd(18)} ${Math.round(run.rate).toLocaleString('en').padStart(9)}/s  ${run.walPerTimeout.toFixed(0)} WAL B/timeout`,
        );
      }
    }
    const base = median(runs.get(chosen[0]!.name)!.map((x) => x.rate));
    console.log(`\n| table | timeouts/s (median) | × ${chosen[0]!.name} | WAL bytes / timeout | what changes |\n|---|---:|---:|---:|---|`);
    for (const v of chosen) {
      const rs = runs.get(v.name)!;
      const rate = median(rs.map((x) => x.rate));
      console.log(
        `| ${v.name} | ${Math.round(rate).toLocaleString('en')} | ${(rate / base).toFixed(2)} | ${median(rs.map((x) => x.walPerTimeout)).toFixed(0)} | ${v.what} |`,
      );
    }
  } finally {
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
