// npm run bench:explain [-- options]: where one claim's time goes, node by node. On the bench's
// own PostgreSQL (bench/lib/server.ts), N due timeouts; each statement runs under EXPLAIN (ANALYZE,
// BUFFERS) on one connection, rolled back, the tables vacuumed before each run, in interleaved
// rounds: the worker's batch claim (claim.sql with the close inside, as the worker runs it), the
// limit statement on our schema and on the minimal one (bench/lib/limit.ts). Prints each
// statement's execution time per round and median, and its plan nodes by median time. A node's
// time is its own, its children's subtracted; a CTE Scan also counts the CTE it pulls from, so
// CTE times overlap. EXPLAIN's per-row timing adds overhead: compare statements with each other,
// not with a drain.
//
//   --n <count>          due timeouts (default 200,000)
//   --k <rows>           rows per statement (default 20,000)
//   --rounds <r>         runs of each statement (default 6)
//   --help               this text
import { parseArgs } from 'node:util';
// dist/: npm run bench:explain builds first.
import { statementValues } from '../dist/db/queries.js';
import { batchSqlHandler } from '../dist/worker/sql-handler.js';
import { startBenchServer, type BenchServer } from './lib/server.ts';
import { pureSqlStatement } from './lib/limit.ts';
import { dueDatabase } from './lib/due-database.ts';
import { CLOSE_MANY_SQL, KIND } from './lib/orders.ts';
import { positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: { n: { type: 'string' }, k: { type: 'string' }, rounds: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false } },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const { n: N, k: K, rounds: ROUNDS } = positiveCounts('bench:explain', args, { n: 200_000, k: 20_000, rounds: 6 });

interface PlanNode {
  'Node Type': string;
  'Actual Total Time': number;
  'Actual Loops': number;
  'Relation Name'?: string;
  'CTE Name'?: string;
  'Subplan Name'?: string;
  'Actual Rows': number;
  Plans?: PlanNode[];
}
interface Explained {
  Plan: PlanNode;
  'Execution Time': number;
}

/** Each node's own time (its total less its children's), keyed by where it sits. */
function ownTimes(node: PlanNode, out: Map<string, number>, path: string): void {
  const kids = node.Plans ?? [];
  const total = node['Actual Total Time'] * node['Actual Loops'];
  const own = total - kids.reduce((s, k) => s + k['Actual Total Time'] * k['Actual Loops'], 0);
  const where = node['Subplan Name'] ? `${path}{${node['Subplan Name']}}` : path;
  const label = `${where}/${node['Node Type']}${node['Relation Name'] ? `:${node['Relation Name']}` : ''}${node['CTE Name'] ? `[${node['CTE Name']}]` : ''}`;
  out.set(label, (out.get(label) ?? 0) + Math.max(0, own));
  for (const k of kids) ownTimes(k, out, where);
}

/** Rows the plan's writes to the timeouts table took (delete or update): every run must take K,
 *  or the profile is of some other work. */
function rowsTaken(node: PlanNode): number {
  const own = node['Node Type'] === 'ModifyTable' && node['Relation Name'] === 'timeouts' ? node['Actual Rows'] : 0;
  return Math.max(own, ...(node.Plans ?? []).map(rowsTaken));
}

interface Statement {
  name: string;
  sql: string;
  values: unknown[];
  vacuum: string;
}

async function prepare(server: BenchServer, schema: 'ours' | 'minimal') {
  const { pool, drop } = await dueDatabase(server, { label: 'bench_explain', n: N, schema, shardSize: K, poolMax: 2 });
  const statements: Statement[] = [];
  if (schema === 'minimal') {
    statements.push({ name: 'limit, minimal schema', sql: pureSqlStatement('array', KIND, 'minimal'), values: [K], vacuum: 'VACUUM timeouts, orders' });
  } else {
    // The worker's claim reads its shard (pinned rows): one shard row for it to read.
    const scan = await pool.query<{ id: string }>(
      `INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, shard_count, mapped_at) VALUES (1, 'bench', now(), 'mapped', 1, now()) RETURNING id::text`,
    );
    const shard = await pool.query<{ id: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit) VALUES ($1, $2, 0, 0, $3) RETURNING id::text`,
      [scan.rows[0]!.id, KIND, K],
    );
    const batch = await batchSqlHandler(pool, CLOSE_MANY_SQL, 60_000);
    if (!batch) throw new Error('the close statement has no batch form; see src/worker/sql-handler.ts');
    const vacuum = 'VACUUM timeout_center.timeouts, timeout_center.done_timeouts, orders';
    statements.push({
      name: 'worker batch claim',
      sql: batch.sql,
      values: statementValues('worker/claim', { shardId: Number(shard.rows[0]!.id), kind: KIND, claimLimit: K, batch: true }),
      vacuum,
    });
    statements.push({ name: 'limit, our schema', sql: pureSqlStatement('array', KIND, 'ours'), values: [K], vacuum });
  }
  return { pool, statements, drop };
}

async function main(): Promise<void> {
  const server = await startBenchServer({ walWarmupBytes: 0 });
  try {
    const runs = new Map<string, { exec: number[]; nodes: Map<string, number>[] }>();
    for (const schema of ['ours', 'minimal'] as const) {
      const { pool, statements, drop } = await prepare(server, schema);
      const c = await pool.connect();
      try {
        await c.query('SET jit = off');
        for (let round = 0; round < ROUNDS; round++) {
          for (const s of statements) {
            await c.query(s.vacuum);
            await c.query('BEGIN');
            const { rows } = await c.query<{ 'QUERY PLAN': Explained[] }>({ text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${s.sql}`, values: s.values });
            await c.query('ROLLBACK');
            const plan = rows[0]!['QUERY PLAN'][0]!;
            const taken = rowsTaken(plan.Plan);
            if (taken !== K) throw new Error(`${s.name} took ${taken} rows, not ${K}: the bench's setup is wrong`);
            const nodes = new Map<string, number>();
            ownTimes(plan.Plan, nodes, '');
            const r = runs.get(s.name) ?? { exec: [], nodes: [] };
            r.exec.push(plan['Execution Time']);
            r.nodes.push(nodes);
            runs.set(s.name, r);
          }
        }
      } finally {
        c.release();
        await drop();
      }
    }
    const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor((a.length - 1) / 2)]!;
    console.log(`${N.toLocaleString('en')} due timeouts, ${K.toLocaleString('en')} rows per statement, ${ROUNDS} rounds, one connection`);
    for (const [name, r] of runs) {
      console.log(`\n${name}: ${r.exec.map((x) => x.toFixed(0)).join(' / ')} ms, median ${median(r.exec).toFixed(1)} ms`);
      const labels = new Set(r.nodes.flatMap((m) => [...m.keys()]));
      const byTime = [...labels].map((l) => [l, median(r.nodes.map((m) => m.get(l) ?? 0))] as const).sort((a, b) => b[1] - a[1]);
      for (const [label, ms] of byTime.filter(([, ms]) => ms >= 0.5)) console.log(`${ms.toFixed(1).padStart(8)} ms  ${label}`);
    }
  } finally {
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
