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
import { execFileSync, spawnSync } from 'node:child_process';
import { CLI, killAll, runCli, spawnCli } from '../helpers/processes.js';
import { waitForDrain, writeConfig } from '../helpers/orders.js';
import { sqlHandlerForm } from '../../src/worker/sql-handler.js';
import { bindLiterals } from '../../src/worker/bind-literals.js';
import { sql } from '../../src/db/queries.js';
import { readFileSync } from 'node:fs';
import { freePort, stopAllServers } from '../helpers/servers.js';
import { createTestDatabase } from '../helpers/services.js';
import { requireTools } from '../helpers/system-tools.js';
import { forOrder, namedBlock, statements } from '../docs/readme-blocks.js';
import { report, Scenario, waitUntil } from '../faults/harness.js';

const tools = requireTools('citus');

/** A README block run as written (one simple-protocol string): one result per statement. */
async function runBlock(pool: pg.Pool, text: string): Promise<pg.QueryResult[]> {
  const r = (await pool.query(text)) as unknown as pg.QueryResult | pg.QueryResult[];
  return Array.isArray(r) ? r : [r];
}

/** The result of a payment block's UPDATE of orders (its row count: paid or refused). */
function paymentOf(block: string, results: pg.QueryResult[]): pg.QueryResult {
  return results[statements(block).findIndex((st) => /^UPDATE orders\b/i.test(st))]!;
}

/** EXPLAIN's text of a statement. */
async function explain(pool: pg.Pool, statement: string, values?: unknown[]): Promise<string> {
  const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${statement}`, values);
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

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

  const run = (text: string) => runBlock(s.pool, text);

  it('migrate laid timeouts and done_timeouts out colocated on the bucket, the control plane on the coordinator; status shows it', async () => {
    expect(s.citus).toBe(true);
    const { rows: dist } = await s.pool.query<{ table: string; method: string; colocation: number; shards: number }>(
      `SELECT logicalrelid::text AS table, partmethod AS method, colocationid AS colocation,
              (SELECT count(*) FROM pg_dist_shard sh WHERE sh.logicalrelid = p.logicalrelid)::int AS shards
         FROM pg_dist_partition p WHERE logicalrelid::text LIKE 'timeout_center.%' ORDER BY 1`,
    );
    // (buckets: one row per bucket, colocated too: sql/citus/buckets.sql)
    expect(dist.map((d) => d.table)).toEqual(['timeout_center.buckets', 'timeout_center.done_timeouts', 'timeout_center.timeouts']);
    expect(dist.every((d) => d.method === 'h' && d.shards === 16)).toBe(true);
    expect(new Set(dist.map((d) => d.colocation)).size).toBe(1);
    expect(await s.count(`SELECT count(*) AS n FROM timeout_center.buckets`)).toBe(16);
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
    const payment = (results: pg.QueryResult[]) => paymentOf(pay, results);
    expect(payment(await run(pay)).rowCount).toBe(1);
    expect((await s.pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE biz_id = '42'`)).rows).toEqual([{ state: 'cancelled' }]);
    expect(payment(await run(pay)).rowCount).toBe(0);
    await run(forOrder(create, 44));
    expect((await run(forOrder(resched, 44)))[0]!.rowCount).toBe(1);
    expect((await run(resched))[0]!.rowCount).toBe(0); // 42 is cancelled: it does not move
    // Router queries: each statement of the blocks is one task on one node.
    for (const st of [...statements(pay).filter((x) => /^UPDATE timeout_center/.test(x)), resched.trim()]) {
      expect(await explain(s.pool, st), st).toMatch(/Task Count: 1\b/);
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

  it("the README's Citus blocks as a login holding the writer role only (docs/roles.md); refused the rest", async () => {
    // migrate applied the roles and grants on the Citus layout (no column privileges there).
    const again = await runCli(['migrate', '--config', s.configPath, '--no-logs'], s.env());
    expect(again.stderr).toBe('');
    const name = `tc_citus_writer_${process.pid}`;
    // The README's roles block, with a name of this run's (roles belong to the cluster).
    await s.pool.query(namedBlock('roles').text.replace(/\borders_service\b/g, name));
    await s.pool.query(`GRANT INSERT ON order_transitions TO ${name}`);
    const w = new pg.Pool({ connectionString: Object.assign(new URL(s.databaseUrl), { username: name }).toString(), max: 1 });
    try {
      const create = namedBlock('citus-create').text;
      const pay = namedBlock('citus-pay').text;
      const resched = namedBlock('citus-reschedule').text;
      const runAs = (text: string) => runBlock(w, text);
      await runAs(forOrder(create, 142));
      expect(paymentOf(pay, await runAs(forOrder(pay, 142))).rowCount).toBe(1);
      expect((await s.pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE biz_id = '142'`)).rows).toEqual([{ state: 'cancelled' }]);
      await runAs(forOrder(create, 144));
      expect((await runAs(forOrder(resched, 144)))[0]!.rowCount).toBe(1);
      for (const sql of ['SELECT * FROM timeout_center.shards', 'SELECT * FROM timeout_center.done_timeouts', 'UPDATE timeout_center.kinds SET paused = true'])
        await expect(w.query(sql), sql).rejects.toMatchObject({ code: '42501' });
    } finally {
      await w.end();
      await s.pool.query(`DELETE FROM timeout_center.timeouts; DELETE FROM timeout_center.done_timeouts; DELETE FROM orders; DELETE FROM order_transitions`);
      await s.pool.query(`DROP OWNED BY ${name}; DROP ROLE ${name}`).catch(() => {});
    }
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
    expect(await explain(s.pool, text, ['order.unpaid', '999', null, 1000, null])).toMatch(/Task Count: 1\b/);

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
    // History is stamped after the handler: each applied row's finished_at is no earlier than the
    // closing transition the handler's UPDATE wrote (order_transitions.at: clock_timestamp() in
    // the orders trigger, on the coordinator), as on one PostgreSQL (claim.sql).
    const { rows: early } = await s.pool.query<{ n: number; applied: number }>(
      `WITH d AS MATERIALIZED (SELECT biz_id::bigint AS id, finished_at FROM timeout_center.done_timeouts WHERE result = 'applied')
       SELECT count(*) FILTER (WHERE d.finished_at < t.at)::int AS n, count(*)::int AS applied
         FROM d JOIN order_transitions t ON t.order_id = d.id AND t.to_status = 'closed'`,
    );
    expect(early[0]).toEqual({ n: 0, applied: inv.applied });
    // The operator CLI reads the Citus store.
    for (const args of [['scans'], ['failed'], ['status'], ['purge', '--dry-run'], ['purge', '--done-after', '0s']]) {
      const r = await runCli(args, s.env());
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    await s.stopAll();
  }, 120_000);

  it('the operator actions and the console on the Citus store: retry (CLI and console: by id, shard, scan, kind; left alone), rerun, cancel, reschedule, generate, every page over HTTP', async () => {
    const url = await cluster.createDatabase('tc_citus_ops');
    // One attempt, then failed: the poison orders fail in real shards of real scans.
    const o = await Scenario.create('citus-ops', { databaseUrl: url, kind: { shardSize: 100, maxAttempts: 1 } });
    const consoleProcs: ReturnType<typeof spawnCli>[] = [];
    try {
      const poison = Array.from({ length: 16 }, (_, i) => 5 + i * 10); // 5, 15, ..., 155: in 10 of the 16 buckets
      await o.seed(160, { dueInMs: 500, spreadMs: 0, poison });
      o.coordinator();
      o.worker('worker-1');
      await waitUntil(
        'the poison rows failed',
        async () => (await o.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state = 'failed'`)) === poison.length,
        120_000,
        250,
      );
      await o.expectInvariants(30_000);
      await o.stopAll();
      const failedRows = async () =>
        (
          await o.pool.query<{ id: number; biz: number; shard: number; scan: number; bucket: number }>(
            `SELECT t.id::int, t.biz_id::int AS biz, t.shard_id::int AS shard, s.scan_id::int AS scan, t.bucket
               FROM timeout_center.timeouts t JOIN timeout_center.shards s ON s.id = t.shard_id WHERE t.state = 'failed' ORDER BY t.biz_id::int`,
          )
        ).rows;
      const failed = await failedRows();
      expect(failed.length).toBe(poison.length);
      expect(new Set(failed.map((f) => f.bucket)).size).toBeGreaterThan(4);
      const run = (args: string[]) => {
        const r = spawnSync(process.execPath, [CLI, ...args], { env: { ...process.env, ...o.env() } as NodeJS.ProcessEnv, encoding: 'utf8' });
        return { code: r.status, out: r.stdout, err: r.stderr };
      };
      const cli = <T>(args: string[]): T => {
        const r = run([...args, '--json']);
        expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(0);
        return JSON.parse(r.out) as T;
      };
      // The failed list and a dry run change nothing.
      expect(cli<{ total: number }>(['failed']).total).toBe(poison.length);
      // c: a failed row whose shard failed others too; a and b: two failed rows of other buckets.
      const byShardOf = (shard: number) => failed.filter((f) => f.shard === shard);
      const c = failed.find((f) => byShardOf(f.shard).length >= 2)!;
      expect(c, 'a shard with two failed rows').toBeDefined();
      const [a, b] = failed
        .filter((f) => f.bucket !== c.bucket && f.shard !== c.shard)
        .filter((f, i, all) => all.findIndex((x) => x.bucket === f.bucket) === i);
      expect(b, 'failed rows in two more buckets').toBeDefined();
      const dry = cli<{ matched: number; retried: number; dryRun: boolean }>(['retry', '--id', `${a!.id},${b!.id}`, '--dry-run']);
      expect(dry).toMatchObject({ matched: 2, retried: 2, dryRun: true });
      expect(await o.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state = 'failed'`)).toBe(poison.length);
      // By id (two buckets, and an id that is not failed: exit 1, named).
      const byId = run(['retry', '--id', `${a!.id},${b!.id},1`, '--json']);
      expect(byId.code, byId.err).toBe(1);
      expect(JSON.parse(byId.out)).toMatchObject({ matched: 2, retried: 2, left: 0, ids: [a!.id, b!.id].sort((x, y) => x - y), notFailed: [1] });
      const back = await o.pool.query<{ state: string; attempts: number; shard: number | null; bucket: number; right: boolean }>(
        `SELECT state, attempts, shard_id AS shard, bucket, bucket = timeout_center.bucket_of(biz_id) AS right FROM timeout_center.timeouts WHERE id = ANY($1::bigint[])`,
        [[a!.id, b!.id]],
      );
      expect(back.rows.every((r) => r.state === 'pending' && r.attempts === 0 && r.shard === null && r.right)).toBe(true);
      // The one-live-per-object rule holds per bucket: c's order gets a live timeout again, so
      // retrying by its shard leaves c alone and retries the rest of that shard.
      await schedule(o.pool, { kind: 'order.unpaid', bizId: c!.biz, delayMs: 3_600_000 });
      const ofShard = failed.filter((f) => f.shard === c!.shard && f.id !== a!.id && f.id !== b!.id);
      // (exit 1: a timeout was left alone)
      const byShardRun = run(['retry', '--shard', String(c!.shard), '--json']);
      expect(byShardRun.code, byShardRun.err).toBe(1);
      const byShard = JSON.parse(byShardRun.out) as { matched: number; retried: number; left: number };
      expect(byShard).toMatchObject({ matched: ofShard.length, retried: ofShard.length - 1, left: 1 });
      expect(await o.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE id = $1 AND state = 'failed'`, [c!.id])).toBe(1);
      // The console (a real `timeout-center console` process): retry by id, a shard rerun, then
      // cancel and reschedule; every page and its JSON over HTTP, right contents.
      const port = await freePort();
      const consoleProc = spawnCli('console (citus)', ['console', '--port', String(port)], o.env());
      consoleProcs.push(consoleProc);
      await consoleProc.waitForMsg('console listening', 60_000);
      const origin = `http://127.0.0.1:${port}`;
      const post = async (path: string, body: unknown) => {
        const res = await fetch(`${origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        return { status: res.status, json: (await res.json()) as Record<string, unknown> };
      };
      const left = (await failedRows()).filter((f) => f.id !== c!.id);
      expect(left.length).toBeGreaterThan(1);
      const [d, ...others] = left;
      const retried = await post('/api/failed/retry', { id: [String(d!.id)] });
      expect(retried.status, JSON.stringify(retried.json)).toBe(200);
      expect(retried.json).toMatchObject({ retried: 1 });
      const otherShard = others[0]!.shard;
      const rerun = await post(`/api/shards/${otherShard}/rerun`, {});
      expect(rerun.status, JSON.stringify(rerun.json)).toBe(200);
      expect(rerun.json).toMatchObject({ retried: others.filter((f) => f.shard === otherShard).length });
      // By scan and kind together (the CLI), then all of the kind (the console): the rest.
      const rest = (await failedRows()).filter((f) => f.id !== c!.id);
      const scan = rest[0]!.scan;
      const inScan = rest.filter((f) => f.scan === scan).length;
      const cInScan = c!.scan === scan ? 1 : 0; // c, if in the scan, is left alone again (exit 1)
      const byScanRun = run(['retry', '--scan', String(scan), '--kind', 'order.unpaid', '--json']);
      expect(byScanRun.code, byScanRun.err).toBe(cInScan);
      expect(JSON.parse(byScanRun.out)).toMatchObject({ matched: inScan + cInScan, retried: inScan, left: cInScan });
      const all = await post('/api/failed/retry', { kind: 'order.unpaid' });
      expect(all.status, JSON.stringify(all.json)).toBe(200);
      expect(await o.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state = 'failed'`)).toBe(1); // c, left alone
      // Cancel and reschedule by the console route by bucket (router queries).
      await o.pool.query(`INSERT INTO orders (id, status) VALUES (900001, 'unpaid'), (900002, 'unpaid')`);
      for (const id of [900001, 900002]) await schedule(o.pool, { kind: 'order.unpaid', bizId: id, delayMs: 3_600_000 });
      expect((await post('/api/timeouts/cancel', { kind: 'order.unpaid', bizId: '900001' })).status).toBe(200);
      const dueAt = new Date(Date.now() + 1000).toISOString();
      expect((await post('/api/timeouts/reschedule', { kind: 'order.unpaid', bizId: '900002', dueAt })).status).toBe(200);
      expect((await o.pool.query(`SELECT biz_id, state FROM timeout_center.timeouts WHERE biz_id IN ('900001', '900002') ORDER BY biz_id`)).rows).toEqual([
        { biz_id: '900001', state: 'cancelled' },
        { biz_id: '900002', state: 'pending' },
      ]);
      // Every page, and its JSON.
      const scanId = (await o.pool.query<{ id: number }>(`SELECT max(id)::int AS id FROM timeout_center.scans`)).rows[0]!.id;
      const audit = (await o.pool.query<{ action: string }>(`SELECT action FROM timeout_center.audit_log ORDER BY id`)).rows.map((r) => r.action);
      expect(audit).toEqual(expect.arrayContaining(['retry', 'rerun_shard', 'cancel', 'reschedule']));
      const pages: [string, RegExp][] = [
        ['/', /order\.unpaid/],
        ['/kinds', /order\.unpaid/],
        ['/databases', /<html/],
        ['/scans', new RegExp(`>${scanId}<`)],
        [`/scans/${scanId}`, /order\.unpaid/],
        ['/timeouts?kind=order.unpaid&bizId=900001', /cancelled/],
        ['/failed', new RegExp(`>${c!.biz}<`)],
        ['/warnings', /<html/],
        ['/audit', /rerun_shard/],
      ];
      for (const [path, contents] of pages) {
        const page = await fetch(`${origin}${path}`);
        const text = await page.text();
        expect(page.status, `${path}: ${text.slice(0, 300)}`).toBe(200);
        expect(text, path).toMatch(contents);
        const api = await fetch(`${origin}/api${path === '/' ? '/' : path}`);
        expect(api.status, `/api${path}`).toBe(200);
        await api.json();
      }
      const overview = (await (await fetch(`${origin}/api/`)).json()) as { backlog: { kind: string; failed: number }[] };
      expect(overview.backlog).toEqual([expect.objectContaining({ kind: 'order.unpaid', failed: 1 })]);
      const failedJson = (await (await fetch(`${origin}/api/failed`)).json()) as { total: number; rows: { timeoutId: number }[] };
      expect(failedJson.total).toBe(1);
      expect(failedJson.rows.map((r) => r.timeoutId)).toEqual([c!.id]);
      const scansJson = (await (await fetch(`${origin}/api/scans`)).json()) as { scanId: number }[];
      expect(scansJson.length).toBeGreaterThan(0);
      const scanJson = (await (await fetch(`${origin}/api/scans/${scanId}`)).json()) as { scan: { scanId: number }; shards: unknown[] };
      expect(scanJson.scan.scanId).toBe(scanId);
      expect(scanJson.shards.length).toBeGreaterThan(0);
      await consoleProc.stop();

      // The retried rows run again (the poison made closable) beside `generate`'s orders and
      // payments, with a bucket on every timeout; I1-I4 and history = truth at the end.
      await o.pool.query(`UPDATE orders SET poison = false`);
      o.coordinator();
      o.worker('worker-2');
      const gen = await runCli(['generate', '--rate', '200', '--paid', '10', '--min-delay', '0', '--max-delay', '2', '--duration', '3'], o.env(), 60_000);
      expect(gen.code, gen.stderr).toBe(0);
      const stopped = gen.lines.find((l) => l.msg === 'generator stopped') as { created: number; paid: number } | undefined;
      expect(stopped?.created).toBeGreaterThanOrEqual(400);
      expect(stopped?.paid).toBeGreaterThan(0);
      expect(gen.lines.some((l) => l.msg === 'generator batch failed; retrying next second')).toBe(false);
      // I1-I3 as usual; I4 (the scans' failed totals against the failed rows) counts the 15 the
      // operator retried and the rerun closed: the scans that failed them keep their totals.
      const inv = await waitForDrain(o.pool, 60_000);
      expect(inv).toEqual({ lost: 0, doubled: 0, wrong: 0, reduceMismatch: poison.length - 1, unreducedScans: 0 });
      const applied = await o.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied'`);
      expect(await o.count(`SELECT count(*) AS n FROM order_transitions WHERE to_status = 'closed'`), 'closes = applied timeouts').toBe(applied);
      const failedNow = await o.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state = 'failed'`);
      expect(
        await o.count(
          `SELECT (SELECT count(*) FROM timeout_center.timeouts WHERE bucket IS DISTINCT FROM timeout_center.bucket_of(biz_id))
                + (SELECT count(*) FROM timeout_center.done_timeouts WHERE bucket IS DISTINCT FROM timeout_center.bucket_of(biz_id)) AS n`,
        ),
      ).toBe(0);
      const paidOrders = await o.count(`SELECT count(*) AS n FROM orders WHERE status = 'paid'`);
      expect(paidOrders).toBe(stopped!.paid);
      report('citus operator actions: 16 failed retried by CLI and console, generate 3 s', {
        ...inv,
        applied,
        failed: failedNow,
        generated: stopped!.created,
        paid: stopped!.paid,
      });
      expect(failedNow).toBe(1); // c: left alone
      await o.stopAll();
    } finally {
      for (const p of consoleProcs) await p.stop().catch(() => {});
      await o.close();
    }
  }, 240_000);

  it('a SQL handler Citus refuses inside the claim (a VOLATILE function in its UPDATE) runs in the plain form from the start', async () => {
    // PREPARE accepts it; Citus refuses it only when it plans the claim (EXPLAIN, or the first
    // shard): every batch claim failed, and a shard leased ahead failed outright (its warm-up
    // EXPLAIN) and waited for its lease to run out.
    const form = await sqlHandlerForm(
      s.pool,
      "UPDATE orders SET status = 'closed', closed_at = clock_timestamp() WHERE id = ANY($1) AND status = 'unpaid' RETURNING id",
      1000,
    );
    expect(form.form).toBe('plain');
    expect(form.reason).toMatch(/must not be VOLATILE/);
  });

  it('settle on read is refused on Citus with a clear error (0A000) and changes nothing', async () => {
    // sql/citus/settle.sql: both the SQL function and the Settler's bind call settle_run.
    await s.pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, bucket) VALUES ('order.unpaid', 'settle-1', now() - interval '1 hour', timeout_center.bucket_of('settle-1'))`,
    );
    for (const call of [
      `SELECT * FROM timeout_center.settle('order.unpaid', 'settle-1')`,
      `SELECT * FROM timeout_center.settle_run('order.unpaid', 'settle-1', 1000, 'settle:test', 5000)`,
    ]) {
      const err = await s.pool.query(call).then(
        () => undefined,
        (e: unknown) => e as { code?: string; message?: string; hint?: string },
      );
      expect(err?.code, call).toBe('0A000');
      expect(err?.message).toMatch(/settle on read is not supported on a Citus timeout database yet .*nothing was changed/);
      expect(err?.hint).toMatch(/all_timeouts/);
    }
    const { rows } = await s.pool.query(
      `SELECT state, shard_id FROM timeout_center.timeouts WHERE bucket = timeout_center.bucket_of('settle-1') AND biz_id = 'settle-1'`,
    );
    expect(rows).toEqual([{ state: 'pending', shard_id: null }]);
    await s.pool.query(`DELETE FROM timeout_center.timeouts WHERE bucket = timeout_center.bucket_of('settle-1') AND biz_id = 'settle-1'`);
  });

  it('a kind added after the layout: ALTER TYPE ... ADD VALUE on the coordinator reaches every node, its timeouts route and drain', async () => {
    const newKind = 'order.reminded'; // sorts before order.unpaid: ADD VALUE ... BEFORE
    const config = JSON.parse(readFileSync(s.configPath, 'utf8')) as { kinds: Record<string, unknown> };
    config.kinds[newKind] = config.kinds['order.unpaid'];
    const configPath = writeConfig(config as Parameters<typeof writeConfig>[0]);
    const migrated = await runCli(['migrate', '--config', configPath], s.env());
    expect(migrated.code, migrated.stderr).toBe(0);
    for (const node of [cluster.coordinator, ...cluster.workers]) {
      const rows = await cluster.query<{ labels: string[] }>(node, 'tc_citus', 'SELECT enum_range(NULL::timeout_center.kind)::text[] AS labels');
      expect(rows[0]!.labels, `node ${node.port}`).toEqual([newKind, 'order.unpaid']);
    }
    // The insert routes to the worker node of its bucket, which parses the new label.
    await s.pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(300001, 300020) g`);
    for (let i = 300001; i <= 300020; i += 1) await schedule(s.pool, { kind: newKind, bizId: i, delayMs: 0 });
    const run = spawnCli('run (new kind)', ['run', '--config', configPath], s.env());
    try {
      await waitUntil(
        'the new kind drained',
        async () => (await s.count(`SELECT count(*) AS n FROM timeout_center.done_timeouts WHERE kind = $1 AND result = 'applied'`, [newKind])) === 20,
        60_000,
      );
    } finally {
      await run.stop(10_000);
    }
    expect(await s.count(`SELECT count(*) AS n FROM orders WHERE id BETWEEN 300001 AND 300020 AND status = 'closed'`)).toBe(20);
  }, 90_000);

  it("orders colocated with timeouts on the bucket: claim, handler and move in one call on the bucket's worker node, history after the handler, a failing row isolated, a worker killed before its commit", async () => {
    const url = await cluster.createDatabase('tc_citus_colocated');
    // The handler takes the shard's bucket as $2 (a smallint: PostgreSQL infers it from the column).
    const handler = "UPDATE orders SET status = 'closed' WHERE bucket = $2 AND id = ANY($1) AND status = 'unpaid' RETURNING id";
    const c = await Scenario.create('citus-colocated', {
      databaseUrl: url,
      kind: { shardSize: 300, maxAttempts: 2, handler: { type: 'sql', sql: handler } },
      worker: { concurrency: 2 },
    });
    try {
      // The business table, distributed on the same bucket and colocated with timeouts (the
      // scenario's own orders, a plain table on the coordinator, make way). Its trigger stamps the
      // close on the worker node's clock, counts closes, and refuses the poison row.
      await c.pool.query(`DROP TABLE orders CASCADE`);
      await c.pool.query(`
        SET citus.enable_unsafe_triggers = on;
        CREATE TABLE orders (id bigint NOT NULL, bucket smallint NOT NULL, status text NOT NULL, poison boolean NOT NULL DEFAULT false,
                             closes integer NOT NULL DEFAULT 0, closed_at timestamptz, PRIMARY KEY (id, bucket));
        CREATE FUNCTION orders_close() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.status = 'closed' AND OLD.status IS DISTINCT FROM 'closed' THEN
            IF NEW.poison THEN RAISE EXCEPTION 'order % cannot be closed (poison row)', NEW.id; END IF;
            NEW.closed_at := clock_timestamp();
            NEW.closes := OLD.closes + 1;
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER orders_close BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_close();
        SELECT create_distributed_table('orders', 'bucket', colocate_with => 'timeout_center.timeouts');`);
      await c.pool.query(
        `INSERT INTO orders (id, bucket, status, poison)
         SELECT g, timeout_center.bucket_of(g::text), CASE WHEN g % 10 = 0 THEN 'paid' ELSE 'unpaid' END, g = 777 FROM generate_series(1, 3000) g`,
      );
      await c.pool.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, bucket)
         SELECT 'order.unpaid', g::text, now() + interval '1 second' + g * interval '0.3 millisecond', timeout_center.bucket_of(g::text)
           FROM generate_series(1, 3000) g`,
      );
      // The claim is one task on one worker node: Citus delegates the call.
      const bucket = (await c.pool.query<{ b: number }>(`SELECT buckets[1] AS b FROM timeout_center.layout`)).rows[0]!.b;
      const call = sql('citus/worker/claim_colocated', {
        bucket,
        shardId: 0,
        kind: 'order.unpaid',
        claimLimit: 0,
        handler: handler.replace('$1', '($1::bigint[])'),
        lockTimeoutMs: 100,
      });
      // (without the file's comment lines: Citus cannot EXPLAIN a delegated call that has them)
      const text = bindLiterals(call)
        .split('\n')
        .filter((l) => !l.startsWith('--'))
        .join('\n');
      const explained = await explain(c.pool, text);
      expect(explained).toMatch(/Task Count: 1\b/);
      expect(explained).toMatch(new RegExp(`port=(${cluster.workers.map((w) => w.port).join('|')})\\b`));
      expect(explained).toMatch(/Function Scan on claim_in_bucket/);
      // And as the worker sends it (bound parameters, inside a transaction): Citus says it pushed
      // the call down (DEBUG1), rather than running the function on the coordinator.
      const probe = await c.pool.connect();
      const notices: string[] = [];
      probe.on('notice', (m) => notices.push(m.message ?? ''));
      try {
        await probe.query('BEGIN');
        await probe.query('SET LOCAL client_min_messages = debug1');
        await probe.query(call);
        await probe.query('ROLLBACK');
      } finally {
        probe.release();
      }
      expect(notices).toContain('pushing down function call in a multi-statement transaction');

      // One worker process is SIGKILLed before its first shard's commit (its call ran on the worker
      // node inside the open transaction): the shard runs again, pins its rows and splits, and the
      // function then applies pinned rows (its first branch).
      const victim = c.worker('worker-victim', { failpoints: 'worker.before-commit=1*kill' });
      const worker = c.worker('worker-colocated');
      for (const w of [victim, worker]) {
        const form = await w.waitForMsg(/handler runs in the/, 30_000);
        expect(form['form'], String(form['reason'])).toBe('batch');
        expect(String(form['reason'])).toMatch(/bucket's worker node/);
      }
      c.coordinator();
      await victim.exited;
      expect(victim.stderr).toContain('failpoint worker.before-commit hit: kill');
      await waitUntil(
        'the colocated drain',
        async () => (await c.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state IN ('pending', 'dispatched')`)) === 0,
        90_000,
        250,
      );
      const { rows: closes } = await c.pool.query<{ once: number; more: number; paid: number; poison: number }>(
        `SELECT count(*) FILTER (WHERE closes = 1)::int AS once, count(*) FILTER (WHERE closes > 1)::int AS more,
                count(*) FILTER (WHERE status = 'paid' AND closes > 0)::int AS paid, count(*) FILTER (WHERE poison AND closes > 0)::int AS poison
           FROM orders`,
      );
      expect(closes[0]).toEqual({ once: 2699, more: 0, paid: 0, poison: 0 });
      const { rows: history } = await c.pool.query<{ applied: number; skipped: number; failed: number; early: number }>(
        `SELECT (SELECT count(*) FROM timeout_center.done_timeouts WHERE result = 'applied')::int AS applied,
                (SELECT count(*) FROM timeout_center.done_timeouts WHERE result = 'skipped')::int AS skipped,
                (SELECT count(*) FROM timeout_center.timeouts WHERE state = 'failed' AND biz_id = '777')::int AS failed,
                (SELECT count(*) FROM timeout_center.done_timeouts d JOIN orders o ON o.bucket = d.bucket AND o.id = d.biz_id::bigint
                  WHERE d.result = 'applied' AND d.finished_at < o.closed_at)::int AS early`,
      );
      // Every applied row's history is stamped after its close (the handler ran before the stamp).
      expect(history[0]).toEqual({ applied: 2699, skipped: 300, failed: 1, early: 0 });
      const { rows: counts } = await c.pool.query<{ done: number; skipped: number }>(
        `SELECT sum(done_count)::int AS done, sum(skipped_count)::int AS skipped FROM timeout_center.shards WHERE state = 'done'`,
      );
      expect(counts[0]).toEqual({ done: 2699, skipped: 300 });
      const again = await c.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
      expect(again).toBeGreaterThan(0);
      report('citus colocated drain: 3,000 (300 paid, 1 poison), a worker SIGKILLed before its commit', { ms: c.elapsedMs(), shardsRunAgain: again });

      // `generate` against colocated orders: each order written with its bucket (the table has
      // one), each timeout too; its payments and the drain never both pay and close an order.
      const gen = await runCli(['generate', '--rate', '100', '--paid', '20', '--min-delay', '0', '--max-delay', '1', '--duration', '2'], c.env(), 60_000);
      expect(gen.code, gen.stderr).toBe(0);
      const stopped = gen.lines.find((l) => l.msg === 'generator stopped') as { created: number; paid: number } | undefined;
      expect(gen.lines.some((l) => l.msg === 'generator batch failed; retrying next second')).toBe(false);
      expect(stopped?.created).toBeGreaterThanOrEqual(100);
      await waitUntil(
        "generate's orders drained",
        async () => (await c.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state IN ('pending', 'dispatched')`)) === 0,
        60_000,
        250,
      );
      const { rows: generated } = await c.pool.query<{ orders: number; wrongBucket: number; paid: number; closed: number; both: number; open: number }>(
        `SELECT count(*)::int AS orders, count(*) FILTER (WHERE bucket <> timeout_center.bucket_of(id::text))::int AS "wrongBucket",
                count(*) FILTER (WHERE status = 'paid')::int AS paid, count(*) FILTER (WHERE status = 'closed' AND closes = 1)::int AS closed,
                count(*) FILTER (WHERE status = 'paid' AND closes > 0)::int AS both, count(*) FILTER (WHERE status = 'unpaid')::int AS open
           FROM orders WHERE id > 3000`,
      );
      expect(generated[0]).toEqual({
        orders: stopped!.created,
        wrongBucket: 0,
        paid: stopped!.paid,
        closed: stopped!.created - stopped!.paid,
        both: 0,
        open: 0,
      });
      expect(await c.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE bucket <> timeout_center.bucket_of(biz_id)`)).toBe(0);

      // The README's payment for colocated orders (citus-colocated-pay): it pays once, cancels the
      // timeout, and each of its statements is one task on one node (a router transaction).
      const pay = namedBlock('citus-colocated-pay').text;
      const order = 9042;
      await c.pool.query(`INSERT INTO orders (id, bucket, status) VALUES ($1, timeout_center.bucket_of($2), 'unpaid')`, [order, String(order)]);
      await c.pool.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, bucket) VALUES ('order.unpaid', $1, now() + interval '1 hour', timeout_center.bucket_of($1))`,
        [String(order)],
      );
      const paying = async () => paymentOf(pay, await runBlock(c.pool, forOrder(pay, order))).rowCount;
      expect(await paying()).toBe(1);
      expect(await paying()).toBe(0);
      expect((await c.pool.query(`SELECT state FROM timeout_center.timeouts WHERE biz_id = $1`, [String(order)])).rows).toEqual([{ state: 'cancelled' }]);
      for (const st of statements(pay).filter((x) => /^UPDATE/.test(x))) expect(await explain(c.pool, forOrder(st, order)), st).toMatch(/Task Count: 1\b/);
      // Without the bucket (the citus-pay block, for orders on the coordinator) the orders UPDATE
      // goes to every shard, as the README says.
      const unbucketed = statements(namedBlock('citus-pay').text).find((st) => /^UPDATE orders\b/i.test(st))!;
      expect(await explain(c.pool, forOrder(unbucketed, order))).toMatch(/Task Count: 16\b/);
      await c.stopAll();
    } finally {
      await c.close();
    }
  }, 150_000);
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
      const citusOnly = [
        'citus/coordinator/due_probe',
        'citus/coordinator/any_doomed',
        'citus/worker/claim_colocated',
        'citus/worker/close_shard',
        'citus/worker/external_claim_shard',
        'citus/worker/external_record_lock',
        'citus/worker/external_close_shard',
      ];
      for (const name of names.filter((n) => n.startsWith('citus/') && !citusOnly.includes(n))) {
        expect(names, name).toContain(name.slice('citus/'.length));
      }
    } finally {
      await pool.end();
      await db.drop();
    }
  });
});
