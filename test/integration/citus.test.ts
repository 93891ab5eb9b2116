// The center's database on a Citus cluster of its own (test/helpers/citus.ts: a coordinator and two
// worker nodes): `migrate` applies the Citus layout (src/db/citus-layout.ts, sql/citus/layout.sql)
// and names it, `status` shows it with the node count, the README's Citus blocks (section 3e) do
// what the text says, schedule()/cancel()/reschedule() route by bucket, and a coordinator with two
// workers drains timeouts there with I1-I4 holding. Then a plain PostgreSQL: nothing of the layout.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancel, reschedule, schedule } from '../../src/schedule.js';
import { statements as compiled } from '../../src/db/statements.generated.js';
import { startCitusCluster, type CitusCluster } from '../helpers/citus.js';
import { execFileSync } from 'node:child_process';
import { CLI, killAll, runCli } from '../helpers/processes.js';
import { stopAllServers } from '../helpers/servers.js';
import { createTestDatabase } from '../helpers/services.js';
import { requireTools } from '../helpers/system-tools.js';
import { forOrder, namedBlock, statements } from '../docs/readme-blocks.js';
import { report, Scenario } from '../faults/harness.js';

const tools = requireTools('citus');

describe.skipIf(tools.skip)(tools.title('Citus: the layout, the README blocks and a drain on a three-node cluster'), () => {
  let cluster: CitusCluster;
  let s: Scenario;

  beforeAll(async () => {
    cluster = await startCitusCluster(2);
    const url = await cluster.createDatabase('tc_citus');
    s = await Scenario.create('citus', { databaseUrl: url, kind: { shardSize: 200 }, worker: { concurrency: 2 } });
  }, 120_000);

  afterAll(async () => {
    await killAll();
    await s?.close();
    await stopAllServers();
  });

  async function run(text: string): Promise<pg.QueryResult[]> {
    const r = (await s.pool.query(text)) as unknown as pg.QueryResult | pg.QueryResult[];
    return Array.isArray(r) ? r : [r];
  }

  it('migrate laid timeouts and done_timeouts out colocated on the bucket, the control plane on the coordinator; status shows it', async () => {
    expect(s.citus).toBe(true);
    const { rows: dist } = await s.pool.query<{ table: string; method: string; colocation: number; shards: number }>(
      `SELECT logicalrelid::text AS table, partmethod AS method, colocationid AS colocation,
              (SELECT count(*) FROM pg_dist_shard sh WHERE sh.logicalrelid = p.logicalrelid)::int AS shards
         FROM pg_dist_partition p WHERE logicalrelid::text LIKE 'timeout_center.%' ORDER BY 1`,
    );
    expect(dist.map((d) => d.table)).toEqual(['timeout_center.done_timeouts', 'timeout_center.timeouts']);
    expect(dist.every((d) => d.method === 'h' && d.shards === 16)).toBe(true);
    expect(dist[0]!.colocation).toBe(dist[1]!.colocation);
    // Every bucket value lands in its own shard.
    const { rows: buckets } = await s.pool.query<{ n: number; shards: number }>(
      `SELECT count(*)::int AS n, count(DISTINCT get_shard_id_for_distribution_column('timeout_center.timeouts', b))::int AS shards
         FROM timeout_center.layout, unnest(buckets) b`,
    );
    expect(buckets[0]).toEqual({ n: 16, shards: 16 });
    // Shards spread over both worker nodes.
    const { rows: nodes } = await s.pool.query<{ node: number }>(
      `SELECT DISTINCT p.nodeport AS node FROM pg_dist_shard_placement p JOIN pg_dist_shard sh USING (shardid)
        WHERE sh.logicalrelid = 'timeout_center.timeouts'::regclass`,
    );
    expect(nodes.map((n) => n.node).sort()).toEqual(cluster.workers.map((w) => w.port).sort());

    // A second migrate changes nothing and says so.
    const again = await runCli(['migrate', '--config', s.configPath], s.env());
    expect(again.code, again.stderr).toBe(0);
    expect(again.lines.some((l) => l.msg === 'applied layout')).toBe(false);
    expect(again.lines.find((l) => l.msg === 'database already up to date')?.['layout']).toBe('citus (16 buckets over the Citus cluster)');

    const status = await runCli(['status'], s.env());
    expect(status.code, status.stderr).toBe(0);
    const text = status.lines.map((l) => String(l.msg)).join('\n');
    expect(text).toMatch(/Layout: citus \(16 buckets over 2 worker node\(s\)\); timeouts' shards per node: 127\.0\.0\.1:\d+ 8, 127\.0\.0\.1:\d+ 8/);
    const json = execFileSync(process.execPath, [CLI, 'status', '--json'], { env: { ...process.env, ...s.env() } as NodeJS.ProcessEnv, encoding: 'utf8' });
    expect(JSON.parse(json).layout).toMatchObject({ name: 'citus', buckets: 16, workerNodes: 2 });
  }, 60_000);

  it("the README's Citus blocks: create, pay, reschedule as the text says, each routed to one node; triggers hold", async () => {
    const create = namedBlock('citus-create').text;
    const pay = namedBlock('citus-pay').text;
    const resched = namedBlock('citus-reschedule').text;
    await run(create);
    const { rows: created } = await s.pool.query(`SELECT state, available_at = due_at AS set_by_trigger FROM timeout_center.timeouts WHERE biz_id = '42'`);
    expect(created).toEqual([{ state: 'pending', set_by_trigger: true }]);
    const payment = (results: pg.QueryResult[]) => results[statements(pay).findIndex((st) => /^UPDATE orders\b/i.test(st))]!;
    expect(payment(await run(pay)).rowCount).toBe(1);
    expect((await s.pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE biz_id = '42'`)).rows).toEqual([{ state: 'cancelled' }]);
    expect(payment(await run(pay)).rowCount).toBe(0);
    await run(forOrder(create, 44));
    expect((await run(forOrder(resched, 44)))[0]!.rowCount).toBe(1);
    expect((await run(resched))[0]!.rowCount).toBe(0); // 42 is cancelled: it does not move
    // Router queries: each statement of the blocks is one task on one node.
    for (const st of [...statements(pay).filter((x) => /^UPDATE timeout_center/.test(x)), resched.trim()]) {
      const { rows } = await s.pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${st}`);
      expect(rows.map((r) => r['QUERY PLAN']).join('\n'), st).toMatch(/Task Count: 1\b/);
    }
    // The triggers run on the shards: an insert not pending is refused, a dispatched row is not cancelled.
    await expect(
      s.pool.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, state, bucket) VALUES ('order.unpaid', '45', now(), 'done', timeout_center.bucket_of('45'))`,
      ),
    ).rejects.toThrow(/must be inserted as pending/);
    await s.pool.query(`UPDATE timeout_center.timeouts SET state = 'dispatched' WHERE bucket = timeout_center.bucket_of('44') AND biz_id = '44'`);
    const late = await s.pool.query(`UPDATE timeout_center.timeouts SET state = 'cancelled' WHERE bucket = timeout_center.bucket_of('44') AND biz_id = '44'`);
    expect(late.rowCount).toBe(0);
    await s.pool.query(`DELETE FROM timeout_center.timeouts; DELETE FROM timeout_center.done_timeouts; DELETE FROM orders; DELETE FROM order_transitions`);
  }, 60_000);

  it('schedule(), cancel(), reschedule() and a coordinator with two workers: every due order closed once, I1-I4', async () => {
    // schedule() etc. pick the Citus statements from the layout (one bucket each: a router query).
    await s.pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(100001, 100100) g`);
    for (let i = 100001; i <= 100100; i += 1) await schedule(s.pool, { kind: 'order.unpaid', bizId: i, delayMs: 2500, payload: { i } });
    const again = await schedule(s.pool, { kind: 'order.unpaid', bizId: 100001, delayMs: 2500 });
    expect(again.created).toBe(false);
    for (let i = 100001; i <= 100010; i += 1) expect(await cancel(s.pool, 'order.unpaid', i)).toBe(true);
    expect(await cancel(s.pool, 'order.unpaid', 100001)).toBe(false);
    expect(await reschedule(s.pool, 'order.unpaid', 100011, { delayMs: 3_600_000 })).toBe(true);
    const { text } = { text: compiled['citus/schedule/schedule'].text };
    const { rows: plan } = await s.pool.query<{ 'QUERY PLAN': string }>({
      text: `EXPLAIN ${text}`,
      values: ['order.unpaid', '999', null, 1000, null],
    });
    expect(plan.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/Task Count: 1\b/);

    // Plus 5,000 inserted by SQL, due over the next 2 s.
    await s.seed(5000, { from: 1, dueInMs: 1500, spreadMs: 2000 });
    const procs = [s.coordinator(), s.worker('worker-1'), s.worker('worker-2')];
    await Promise.all(procs.map((p) => p.waitForMsg(/worker started|became leader/, 20_000)));
    const started = Date.now();
    const inv = await s.expectInvariants(60_000);
    report('citus drain: 5,000 + 90 scheduled, 2 workers, 3 nodes', { ...inv, ms: Date.now() - started });
    expect(inv.applied).toBe(5000 + 90 - 1); // 100011 moved an hour out
    expect(inv.cancelled).toBe(10);
    // Every shard claimed from one bucket, and the history rows sit in the bucket of their biz_id.
    const { rows: wrongBucket } = await s.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM timeout_center.done_timeouts WHERE bucket <> timeout_center.bucket_of(biz_id)`,
    );
    expect(wrongBucket[0]!.n).toBe(0);
    const { rows: shards } = await s.pool.query<{ without: number; buckets: number }>(
      `SELECT count(*) FILTER (WHERE bucket IS NULL)::int AS without, count(DISTINCT bucket)::int AS buckets FROM timeout_center.shards`,
    );
    expect(shards[0]!.without).toBe(0);
    expect(shards[0]!.buckets).toBe(16);
    // The operator CLI reads the Citus store.
    for (const args of [['scans'], ['failed'], ['status'], ['purge', '--dry-run'], ['purge', '--done-after', '0s']]) {
      const r = await runCli(args, s.env());
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    await s.stopAll();
  }, 120_000);
});

describe('plain PostgreSQL: the layout is not there', () => {
  it('no bucket column, no layout table, plain statements', async () => {
    const db = await createTestDatabase('citus-plain');
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      const { rows } = await pool.query<{ n: number; layout: string | null }>(
        `SELECT (SELECT count(*) FROM information_schema.columns WHERE table_schema = 'timeout_center' AND column_name = 'bucket')::int AS n,
                to_regclass('timeout_center.layout')::text AS layout`,
      );
      expect(rows[0]).toEqual({ n: 0, layout: null });
      // No plain statement names a bucket; each Citus form has its plain statement.
      const names = Object.keys(compiled);
      for (const name of names.filter((n) => !n.startsWith('citus/')))
        expect(compiled[name as keyof typeof compiled].text, name).not.toMatch(/\bbucket(_of)?\s*[=(,]|\.bucket\b/);
      for (const name of names.filter((n) => n.startsWith('citus/') && n !== 'citus/coordinator/due_probe')) {
        expect(names, name).toContain(name.slice('citus/'.length));
      }
    } finally {
      await pool.end();
      await db.drop();
    }
  });
});
