// npm run bench:roles [-- --n 100000 --rounds 3 --payments 2000]: what least privilege (issue 46,
// docs/roles.md) costs on the hot paths, the same build on the same database in the same run:
//   - drain: a burst of n timeouts due at one instant, drained by a coordinator and a worker that
//     connect as the schema's owner (no row-level security applies) or as a login holding
//     timeout_center_engine only (its policy on timeouts is a constant true), interleaved rounds,
//     the time from the due instant to the last close's commit;
//   - pay: README section 3's payment block (cancel the timeout, then the guarded UPDATE) run by
//     the owner or by a login holding timeout_center_writer only (its policy compares the kind with
//     writable_kinds()), one connection each, over a table of n pending timeouts: median latency.
// The bench's own PostgreSQL (bench/lib/server.ts), the local Redis.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startBenchServer } from './lib/server.ts';
import { CLOSE_MANY_SQL, insertOrders, KIND, ORDERS_DDL, sleep } from './lib/orders.ts';
import { REDIS_URL } from './lib/workloads.ts';
import { killAll, runCli, spawnCli, type CliProcess } from '../test/helpers/processes.ts';
import { writeConfig } from '../test/helpers/orders.ts';

const { values: args } = parseArgs({
  options: { n: { type: 'string', default: '100000' }, rounds: { type: 'string', default: '3' }, payments: { type: 'string', default: '2000' } },
});
const N = Number(args.n);
const ROUNDS = Number(args.rounds);
const PAYMENTS = Number(args.payments);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function waitFor(proc: CliProcess, msg: string): Promise<void> {
  const t = Date.now();
  while (!proc.lines.some((l) => l.msg === msg)) {
    if (!proc.alive) throw new Error(`${proc.name} exited: ${proc.stderr}`);
    if (Date.now() - t > 60_000) throw new Error(`${proc.name}: no "${msg}" in 60 s`);
    await sleep(50);
  }
}

async function main(): Promise<void> {
  const server = await startBenchServer({ walWarmupBytes: 0 });
  const db = await server.createDatabase('roles');
  const owner = new pg.Pool({ connectionString: db.url, max: 4 });
  const urlAs = (user: string) => {
    const u = new URL(db.url);
    u.username = user;
    return u.toString();
  };
  const procs: CliProcess[] = [];
  try {
    await owner.query(ORDERS_DDL);
    const prefix = `tc-bench-roles-${process.pid}`;
    const configPath = writeConfig({
      redisKeyPrefix: prefix,
      kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_MANY_SQL } } },
      alerts: { lagSlaMs: 3_600_000 },
    });
    const env = (url: string) => ({ DATABASE_URL: url, REDIS_URL });
    const migrated = await runCli(['migrate', '-c', configPath], env(db.url), 60_000);
    if (migrated.code !== 0) throw new Error(`migrate: ${migrated.stderr}`);
    await owner.query(`CREATE ROLE bench_engine LOGIN; GRANT timeout_center_engine TO bench_engine; GRANT SELECT, UPDATE ON orders TO bench_engine;
                       CREATE ROLE bench_writer LOGIN; GRANT timeout_center_writer TO bench_writer; GRANT SELECT, UPDATE ON orders TO bench_writer`);
    const who = { owner: db.url, engine: urlAs('bench_engine') };

    // Drain: interleaved, the order alternating per round.
    const drain: Record<string, number[]> = { owner: [], engine: [] };
    for (let round = 0; round < ROUNDS; round += 1) {
      for (const as of (round % 2 === 0 ? ['owner', 'engine'] : ['engine', 'owner']) as (keyof typeof who)[]) {
        await owner.query('TRUNCATE orders; TRUNCATE timeout_center.done_timeouts; DELETE FROM timeout_center.timeouts');
        // The processes first (their start takes seconds on a loaded box), then the burst, due
        // once it is loaded and analyzed.
        const coordinator = spawnCli('coordinator', ['coordinator', '-c', configPath], env(who[as]));
        const worker = spawnCli('worker', ['worker', '-c', configPath], env(who[as]));
        procs.push(coordinator, worker);
        await Promise.all([waitFor(coordinator, 'became leader'), waitFor(worker, 'worker started')]);
        const dueAt = new Date(Date.now() + 20_000 + N / 10);
        await insertOrders(owner, 1, N, dueAt);
        await owner.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, i::text, $2 FROM generate_series(1, $3::int) i`, [
          KIND,
          dueAt,
          N,
        ]);
        await owner.query('VACUUM ANALYZE');
        await owner.query('CHECKPOINT');
        if (Date.now() > dueAt.getTime()) throw new Error('the burst was loaded after its due instant: raise the lead');
        for (;;) {
          const { rows } = await owner.query<{ left: number }>(
            `SELECT count(*)::int AS left FROM timeout_center.timeouts WHERE state IN ('pending', 'dispatched')`,
          );
          if (rows[0]!.left === 0) break;
          await sleep(100);
        }
        // From the due instant to the last close's commit (track_commit_timestamp).
        const { rows } = await owner.query<{ s: number }>(
          `SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) - $1::timestamptz)::float8 AS s FROM orders WHERE status = 'closed'`,
          [dueAt],
        );
        drain[as]!.push(rows[0]!.s);
        process.stderr.write(`round ${round + 1} ${as}: drained ${N} in ${rows[0]!.s.toFixed(3)} s\n`);
        await Promise.all([coordinator, worker].map((p) => p.stop()));
      }
    }

    // Pay: README section 3's block, one connection, over N pending timeouts due in an hour.
    await owner.query('TRUNCATE orders; TRUNCATE timeout_center.done_timeouts; DELETE FROM timeout_center.timeouts');
    await insertOrders(owner, 1, N, new Date(Date.now() + 3_600_000));
    await owner.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, i::text, now() + interval '1 hour' FROM generate_series(1, $2::int) i`,
      [KIND, N],
    );
    await owner.query('VACUUM ANALYZE');
    // Twice: row-level security off (no writer limited to kinds, the default) and on (a row in
    // writer_kinds for the writer's login).
    const pay: Record<string, number[]> = { owner: [], writer: [], ownerLimited: [], writerLimited: [] };
    const clients = { owner: new pg.Client({ connectionString: db.url }), writer: new pg.Client({ connectionString: urlAs('bench_writer') }) };
    await Promise.all(Object.values(clients).map((c) => c.connect()));
    const half = Math.floor(Math.min(PAYMENTS, N) / 2);
    for (const limited of [false, true]) {
      if (limited) await owner.query(`INSERT INTO timeout_center.writer_kinds (role, kind) VALUES ('bench_writer', $1)`, [KIND]);
      const from = limited ? half + 1 : 1;
      for (let i = from; i < from + half; i += 1) {
        if (i % 10 === 0) continue; // paid already (insertOrders)
        const as = i % 2 === 0 ? 'owner' : 'writer';
        const t = performance.now();
        await clients[as].query(`BEGIN;
UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
 WHERE kind = 'order.unpaid' AND biz_id = '${i}' AND state = 'pending';
UPDATE orders SET status = 'paid' WHERE id = ${i} AND status = 'unpaid';
COMMIT;`);
        pay[limited ? `${as}Limited` : as]!.push(performance.now() - t);
      }
    }
    await Promise.all(Object.values(clients).map((c) => c.end()));
    const report = {
      loadavg: (await import('node:os')).loadavg().map((x) => Number(x.toFixed(2))),
      n: N,
      rounds: ROUNDS,
      drainSeconds: { owner: drain['owner'], engine: drain['engine'] },
      drainMedianRatio: median(drain['owner']!) / median(drain['engine']!),
      payMs: Object.fromEntries(Object.entries(pay).map(([k, v]) => [k, Number(median(v).toFixed(2))])),
      payMedianRatio: median(pay['owner']!) / median(pay['writer']!),
      payLimitedMedianRatio: median(pay['ownerLimited']!) / median(pay['writerLimited']!),
    };
    console.log(JSON.stringify(report, null, 2));
  } finally {
    await killAll();
    await owner.end();
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
