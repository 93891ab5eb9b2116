// The external path on a Citus center (issue 34, "the external path on Citus"): the center's
// database on a Citus cluster of its own (test/helpers/citus.ts: a coordinator and two worker
// nodes, laid out by `migrate`), the orders in a business database on a private PostgreSQL
// (servers.ts startPostgres) that the center does not own. One database per scenario on each: the
// center's on the cluster, the orders' on the private server. Real processes: a coordinator and
// worker processes (harness.ts's CLI).
//   1. a SQL handler with `database: orders`: 3,000 due at once, every 10th order paid, two
//      worker processes;
//   2. an HTTP handler (a small HTTP server in the test closing the orders it is sent) and a code
//      handler (its client a connection to the business database), side by side;
//   3. a worker process SIGKILLed between the business COMMIT and the center's record
//      (failpoint external.after-apply-commit): the shard runs again, finds the first run's
//      marker and records what that run did, without applying twice;
//   4. a worker SIGKILLed right after its claim: the re-run splits the rows in two (split_pinned's
//      Citus form), the halves close them;
//   5. a kind routed over two business databases (modulo): planned per target and bucket, drained;
//   6. a payer's cancel while the shard runs in the business database: refused at once (on Citus
//      the claim writes its rows dispatched, citus/worker/external_claim.sql says why), the order
//      closes once.
// Each ends with I1-I4 across the two databases, closes = applied, and history = the business
// database's truth per order (closed by us <=> done/applied; paid <=> done/skipped; one transition).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { sql } from '../../src/db/queries.js';
import { cancel } from '../../src/schedule.js';
import { startCitusCluster, type CitusCluster } from '../helpers/citus.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { startPostgres, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { requireTools } from '../helpers/system-tools.js';
import { TEST_REDIS_URL, testKeyPrefix } from '../helpers/services.js';
import { report, waitUntil } from './harness.js';
import { quietPool } from '../helpers/quiet-pool.js';

const tools = requireTools('citus');
const SQL_KIND = 'order.close';
const HTTP_KIND = 'order.http';
const CODE_KIND = 'order.code';
/** Routed by modulo over two business databases: even ids in `orders`, odd ones in `orders_b`. */
const ROUTED_KIND = 'order.routed';
/** A code handler without `database:`: its transaction and marker in the Citus center's own
 *  database, its effect a row per timeout in a plain table there (code_effects). */
const CENTER_CODE_KIND = 'order.code_center';
const LEASE_MS = 3000;

let cluster: CitusCluster;
let business: PostgresServer;
let httpServer: Server;
let httpPort = 0;
/** The orders the HTTP service closes (the current scenario's business database). */
let httpOrders: pg.Pool | undefined;
let httpPosts = 0;
/** How many of the next POSTs the HTTP service answers 503 (a batch-level failure). */
let httpBusy = 0;
let n = 0;
let codeModule = '';
let centerCodeModule = '';
const opened: ExternalScenario[] = [];

async function count(pool: pg.Pool, text: string, values: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(text, values);
  return Number(rows[0]?.n ?? 0);
}

class ExternalScenario {
  readonly procs: CliProcess[] = [];
  private constructor(
    readonly label: string,
    readonly center: pg.Pool,
    readonly orders: pg.Pool,
    /** The second business database (the routed kind's odd ids). */
    readonly ordersB: pg.Pool,
    readonly configPath: string,
    readonly env: Record<string, string | undefined>,
  ) {}

  static async create(label: string): Promise<ExternalScenario> {
    n += 1;
    const centerUrl = await cluster.createDatabase(`tc_ext_${n}`);
    const ordersName = `orders_${n}`;
    const admin = quietPool(business.url());
    await admin.query(`CREATE DATABASE ${ordersName}`);
    await admin.query(`CREATE DATABASE ${ordersName}_b`);
    await admin.end();
    const orders = quietPool(business.url(ordersName));
    const ordersB = quietPool(business.url(`${ordersName}_b`));
    await createOrdersSchema(orders);
    await createOrdersSchema(ordersB);
    const kind = { shardSize: 200, maxAttempts: 5, backoffMs: 200, timeLimitMs: 2500 };
    const config: ConfigInput = {
      redisKeyPrefix: testKeyPrefix(`citus-ext-${label}`),
      poolSize: 4,
      businessDatabases: { orders: { url: business.url(ordersName), poolSize: 4 }, orders_b: { url: business.url(`${ordersName}_b`), poolSize: 4 } },
      kinds: {
        [SQL_KIND]: { ...kind, handler: { type: 'sql', sql: CLOSE_SQL, database: 'orders' } },
        [HTTP_KIND]: { ...kind, handler: { type: 'http', url: `http://127.0.0.1:${httpPort}/close` } },
        [CODE_KIND]: { ...kind, handler: { type: 'code', module: codeModule, database: 'orders' } },
        [CENTER_CODE_KIND]: { ...kind, handler: { type: 'code', module: centerCodeModule } },
        [ROUTED_KIND]: { ...kind, handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: ['orders', 'orders_b'] } } },
      },
      coordinator: { lockTtlMs: 2000, republishAfterMs: 1000, maxInFlightShards: 32, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
      worker: { leaseMs: LEASE_MS, blockMs: 200, concurrency: 2, drainTimeoutMs: 3000 },
      alerts: { lagSlaMs: 600_000 },
    };
    const configPath = writeConfig(config);
    const env = { DATABASE_URL: centerUrl, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
    const migrated = await runCli(['migrate', '--config', configPath], env, 60_000);
    if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
    const s = new ExternalScenario(label, quietPool(centerUrl), orders, ordersB, configPath, env);
    // The center code kind's effect: a plain (local) table on the Citus coordinator.
    await s.center.query('CREATE TABLE code_effects (biz_id text PRIMARY KEY, shard_id bigint NOT NULL)');
    expect(await count(s.center, `SELECT count(*) AS n FROM timeout_center.layout WHERE name = 'citus'`), 'the center has the Citus layout').toBe(1);
    opened.push(s);
    httpOrders = orders;
    return s;
  }

  spawn(role: 'coordinator' | 'worker', name: string, failpoints?: string, args: string[] = []): CliProcess {
    const p = spawnCli(name, [role, '--config', this.configPath, ...args], { ...this.env, TC_FAILPOINTS: failpoints });
    this.procs.push(p);
    return p;
  }

  /** Orders [from, to] unpaid (every paidEvery-th paid; `poison` ones refuse to close) in the
   *  business database (the routed kind's: by parity, even in `orders`, odd in `orders_b`), and
   *  their timeouts, due now, in their bucket in the center. */
  async seed(kind: string, from: number, to: number, paidEvery: number, poison: number[] = []): Promise<void> {
    for (const [pool, parity] of kind === ROUTED_KIND
      ? ([
          [this.orders, 0],
          [this.ordersB, 1],
        ] as const)
      : ([[this.orders, -1]] as const))
      await pool.query(
        `INSERT INTO orders (id, status, poison)
         SELECT g, CASE WHEN g % $3::int = 0 THEN 'paid' ELSE 'unpaid' END, g = ANY ($4::bigint[]) FROM generate_series($1::bigint, $2::bigint) g
          WHERE $5::int < 0 OR g % 2 = $5::int`,
        [from, to, paidEvery, poison, parity],
      );
    await this.center.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, bucket)
       SELECT $1, g::text, now(), timeout_center.bucket_of(g::text) FROM generate_series($2::bigint, $3::bigint) g`,
      [kind, from, to],
    );
  }

  /** Every due timeout final and every scan reduced; the open shards and rows when it times out. */
  async drained(timeoutMs: number): Promise<void> {
    await waitUntil(
      `${this.label}: every due timeout final and every scan reduced`,
      async () =>
        (await count(
          this.center,
          `SELECT (SELECT count(*) FROM timeout_center.timeouts WHERE state NOT IN ('done', 'cancelled', 'failed'))
                + (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced') AS n`,
        )) === 0,
      timeoutMs,
      200,
    ).catch(async (err: unknown) => {
      const { rows: t } = await this.center.query(`SELECT state, count(*)::int AS n, min(last_error) AS error FROM timeout_center.timeouts GROUP BY state`);
      const { rows: sh } = await this.center.query(
        `SELECT id, state, attempts, bucket, target, error_sample FROM timeout_center.shards WHERE state IN ('queued', 'running') LIMIT 10`,
      );
      const errors = this.procs.flatMap((p) => p.lines.filter((l) => (l.level ?? 0) >= 50).map((l) => `${p.name}: ${JSON.stringify(l)}`)).slice(0, 5);
      throw new Error(`${(err as Error).message}\ntimeouts: ${JSON.stringify(t)}\nopen shards: ${JSON.stringify(sh)}\nerrors: ${errors.join('\n')}`);
    });
  }

  /**
   * I1-I4 over the two databases (the center's timeouts and scans, the business database's
   * orders and transitions), closes = applied, and per order: closed by us <=> its timeout
   * done/applied, paid <=> done/skipped, at most one transition. Returns the tally and figures.
   */
  async expectInvariants(): Promise<Record<string, number>> {
    const lost = await count(
      this.center,
      `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed')`,
    );
    const unreducedScans = await count(this.center, `SELECT count(*) AS n FROM timeout_center.scans WHERE state <> 'reduced'`);
    const reduceMismatch = await count(
      this.center,
      `SELECT (SELECT coalesce(sum(failed), 0) FROM timeout_center.scans WHERE state = 'reduced')
            - (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed') AS n`,
    );
    // the business truth, over both business databases (an order lives in one)
    const both = async (text: string) => (await count(this.orders, text)) + (await count(this.ordersB, text));
    const doubled = await both(`SELECT count(*) AS n FROM (SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1) x`);
    const paidThenClosed = await both(`SELECT count(*) AS n FROM order_transitions WHERE from_status = 'paid'`);
    const { rows: history } = await this.center.query<{ biz_id: string; state: string; result: string | null }>(
      // a multi-shard read of all_timeouts is no one snapshot (docs/scale.md): the drain is over,
      // and DISTINCT ON keeps one row per order anyway
      `SELECT DISTINCT ON (biz_id) biz_id, state, result FROM timeout_center.all_timeouts ORDER BY biz_id, state`,
    );
    const truthQuery = `SELECT o.id::text, o.status, (SELECT count(*) FROM order_transitions t WHERE t.order_id = o.id)::int AS transitions FROM orders o`;
    const truth = [
      ...(await this.orders.query<{ id: string; status: string; transitions: number }>(truthQuery)).rows,
      ...(await this.ordersB.query<{ id: string; status: string; transitions: number }>(truthQuery)).rows,
    ];
    const byId = new Map(history.map((h) => [h.biz_id, h]));
    const tally: Record<string, number> = {};
    const wrong: string[] = [];
    let cancelledButClosed = 0;
    for (const o of truth) {
      const h = byId.get(o.id);
      const key = `${h?.state ?? 'none'}/${h?.result ?? '-'}/${o.status}`;
      tally[key] = (tally[key] ?? 0) + 1;
      const closedByUs = o.status === 'closed';
      if (closedByUs !== (h?.state === 'done' && h.result === 'applied')) wrong.push(`${o.id}: order ${o.status}, timeout ${h?.state}/${h?.result ?? '-'}`);
      if (o.status === 'paid' && !(h?.state === 'done' && h.result === 'skipped')) wrong.push(`${o.id}: paid, timeout ${h?.state}/${h?.result ?? '-'}`);
      if (o.transitions > (closedByUs ? 1 : 0)) wrong.push(`${o.id}: ${o.transitions} transitions (order ${o.status})`);
      if (h?.state === 'cancelled' && closedByUs) cancelledButClosed += 1;
    }
    const applied = await count(this.center, `SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied'`);
    const closes = await both(`SELECT count(*) AS n FROM order_transitions WHERE to_status = 'closed'`);
    expect({ lost, doubled, wrong: paidThenClosed + cancelledButClosed, reduceMismatch, unreducedScans }, `I1-I4 of ${this.label}`).toEqual({
      lost: 0,
      doubled: 0,
      wrong: 0,
      reduceMismatch: 0,
      unreducedScans: 0,
    });
    expect(closes, `${this.label}: every close comes from exactly one applied timeout`).toBe(applied);
    expect(wrong.slice(0, 20), `${this.label}: history = the business database's truth`).toEqual([]);
    return tally;
  }

  /** Every shard of the drain with its bucket; history rows each in their biz_id's bucket. */
  async expectBuckets(): Promise<void> {
    expect(await count(this.center, `SELECT count(*) AS n FROM timeout_center.shards WHERE bucket IS NULL`), 'every shard has a bucket').toBe(0);
    expect(
      await count(this.center, `SELECT count(*) AS n FROM timeout_center.done_timeouts WHERE bucket <> timeout_center.bucket_of(biz_id)`),
      'every history row in its biz_id bucket',
    ).toBe(0);
  }

  async close(): Promise<void> {
    await Promise.all(this.procs.filter((p) => p.alive).map((p) => p.stop(5000)));
    await this.center.end().catch(() => {});
    await this.orders.end().catch(() => {});
    await this.ordersB.end().catch(() => {});
  }
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
}

describe.skipIf(tools.skip)(tools.title('the external path on a Citus center (business database on its own PostgreSQL, HTTP)'), () => {
  beforeAll(async () => {
    [cluster, business] = await Promise.all([startCitusCluster(2), startPostgres()]);
    // The HTTP kind's service: closes the orders it is sent (guarded), answers what it closed.
    httpServer = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        httpPosts += 1;
        if (httpBusy > 0) {
          httpBusy -= 1;
          return void res.writeHead(503, { 'retry-after': '1' }).end('busy');
        }
        const items = (JSON.parse(body) as { items: { bizId: string }[] }).items;
        void httpOrders!
          .query<{ id: string }>(
            "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id::text",
            [items.map((i) => i.bizId)],
          )
          .then(({ rows }) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ applied: rows.map((r) => r.id) })))
          .catch(() => res.writeHead(500).end());
      });
    });
    httpPort = await listen(httpServer);
    // The code kind's handler: closes the orders it is given on ctx.client (the business database,
    // in the transaction that writes the shard's marker).
    const dir = mkdtempSync(join(tmpdir(), 'tc-citus-code-'));
    codeModule = join(dir, 'close.mjs');
    centerCodeModule = join(dir, 'effect.mjs');
    writeFileSync(
      centerCodeModule,
      `export default async function effect(items, ctx) {
  const { rows } = await ctx.client.query('INSERT INTO code_effects (biz_id, shard_id) SELECT unnest($1::text[]), $2 ON CONFLICT DO NOTHING RETURNING biz_id', [items.map((i) => i.bizId), ctx.shardId]);
  return rows.map((r) => r.biz_id);
}
`,
    );
    writeFileSync(
      codeModule,
      `export default async function close(items, ctx) {
  const { rows } = await ctx.client.query("UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id::text", [items.map((i) => i.bizId)]);
  return rows.map((r) => r.id);
}
`,
    );
  }, 120_000);

  // A scenario that failed leaves its processes running: none may load the next one.
  afterEach(async () => {
    await killAll();
  });

  afterAll(async () => {
    await killAll();
    for (const s of opened) await s.close().catch(() => {});
    await new Promise((r) => httpServer?.close(r));
    await stopAllServers();
  });

  it('a SQL handler in a business database: 3,000 due at once, two worker processes, every unpaid order closed once, the paid untouched, two poison orders failed alone', async () => {
    const s = await ExternalScenario.create('sql');
    const started = Date.now();
    await s.seed(SQL_KIND, 1, 3000, 10, [7, 1507]);
    const workers = [s.spawn('worker', 'worker-1'), s.spawn('worker', 'worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 60_000)));
    s.spawn('coordinator', 'coordinator');
    await s.drained(60_000);
    const drainMs = Date.now() - started;
    const tally = await s.expectInvariants();
    // a poison row fails its batch: isolated in savepoints, it goes back with a backoff until its
    // max attempts (5), then fails alone; its shard mates close
    expect(tally).toEqual({ 'done/applied/closed': 2698, 'done/skipped/paid': 300, 'failed/-/unpaid': 2 });
    await s.expectBuckets();
    const { rows: poisoned } = await s.center.query<{ biz_id: string; attempts: number; last_error: string }>(
      `SELECT biz_id, attempts, last_error FROM timeout_center.timeouts WHERE state = 'failed' ORDER BY biz_id::bigint`,
    );
    expect(poisoned.map((p) => [p.biz_id, p.attempts])).toEqual([
      ['7', 5],
      ['1507', 5],
    ]);
    expect(poisoned[0]!.last_error).toContain('poison row');
    const shards = await count(s.center, `SELECT count(*) AS n FROM timeout_center.shards WHERE target = 'orders'`);
    // How Citus runs the two statements on timeouts: the claim is one router task on the bucket's
    // node; the record's parts are each routed to it, the history rows passing the coordinator.
    const bucket = (await s.center.query<{ b: number }>(`SELECT buckets[1] AS b FROM timeout_center.layout`)).rows[0]!.b;
    const explain = async (statement: { text: string; values: unknown[] }) =>
      (await s.center.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${statement.text}`, statement.values)).rows.map((r) => r['QUERY PLAN']).join('\n');
    const claimPlan = await explain(
      sql('citus/worker/external_claim', { shardId: 1, kind: SQL_KIND, claimLimit: 10, fresh: true, bucket, routed: false, target: 'orders' }),
    );
    expect(claimPlan).toMatch(/Task Count: 1\b/);
    expect(claimPlan).not.toMatch(/Distributed Subplan/);
    const recordPlan = await explain(
      sql('citus/worker/external_record', {
        shardId: 1,
        leaseToken: '00000000-0000-0000-0000-000000000000',
        applied: ['1'],
        failedIds: [],
        failedErrors: [],
        failedPermanent: [],
        maxAttempts: 5,
        backoffMs: 200,
        batchRetryMs: null,
        batchError: null,
        ran: null,
        bucket,
      }),
    );
    const subplans = (recordPlan.match(/Distributed Subplan/g) ?? []).length;
    const taskCounts = [...recordPlan.matchAll(/Task Count: (\d+)/g)].map((m) => Number(m[1]));
    expect(
      taskCounts.every((t) => t === 1),
      `every part of the record on one node:\n${recordPlan}`,
    ).toBe(true);
    report('citus external: SQL handler in a business database, 3,000 due at once', { tally, drainMs, shards, recordSubplans: subplans });
    expect(shards).toBeGreaterThan(0);
  }, 120_000);

  it('an HTTP handler (its first 3 answers 503) and a code handler: 1,000 due at once each drain, every unpaid order closed once', async () => {
    const s = await ExternalScenario.create('http');
    const started = Date.now();
    const postsBefore = httpPosts;
    httpBusy = 3;
    await s.seed(HTTP_KIND, 1, 1000, 10);
    await s.seed(CODE_KIND, 1001, 2000, 10);
    const workers = [s.spawn('worker', 'worker-1'), s.spawn('worker', 'worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 60_000)));
    s.spawn('coordinator', 'coordinator');
    await s.drained(60_000);
    const drainMs = Date.now() - started;
    const tally = await s.expectInvariants();
    expect(tally).toEqual({ 'done/applied/closed': 1800, 'done/skipped/paid': 200 });
    await s.expectBuckets();
    const posts = httpPosts - postsBefore;
    const { rows: perKind } = await s.center.query<{ kind: string; applied: number }>(
      `SELECT kind::text, count(*) FILTER (WHERE result = 'applied')::int AS applied FROM timeout_center.done_timeouts GROUP BY 1 ORDER BY 1`,
    );
    expect(perKind).toEqual([
      { kind: CODE_KIND, applied: 900 },
      { kind: HTTP_KIND, applied: 900 },
    ]);
    // the 503s were batch-level: their rows went back to pending, the attempt not counted
    const batchRetried = await count(s.center, `SELECT coalesce(sum(retried_count), 0) AS n FROM timeout_center.shards WHERE kind = $1`, [HTTP_KIND]);
    const maxAttempts = await count(s.center, `SELECT max(attempts) AS n FROM timeout_center.done_timeouts WHERE kind = $1`, [HTTP_KIND]);
    report('citus external: HTTP and code handlers, 1,000 due at once each', { tally, drainMs, posts, batchRetried, maxAttempts });
    expect(httpBusy).toBe(0);
    expect(batchRetried, 'the rows of the three 503 shards were retried').toBeGreaterThan(0);
    expect(maxAttempts, 'a batch-level failure does not count the attempt').toBe(1);
  }, 120_000);

  it("a code handler without database: (its transaction and marker in the Citus center's own database): 1,000 due at once, each effect once, history = effects, and once more with a worker SIGKILLed between its commit and the record", async () => {
    const s = await ExternalScenario.create('center-code');
    const seed = (from: number, to: number) =>
      s.center.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, bucket)
         SELECT $1, g::text, now(), timeout_center.bucket_of(g::text) FROM generate_series($2::bigint, $3::bigint) g`,
        [CENTER_CODE_KIND, from, to],
      );
    const check = async (n: number) => {
      const { rows } = await s.center.query<{ effects: number; applied: number; matched: number; other: number }>(
        `SELECT (SELECT count(*) FROM code_effects)::int AS effects,
                (SELECT count(*) FROM timeout_center.done_timeouts WHERE kind = $1 AND result = 'applied')::int AS applied,
                (SELECT count(*) FROM timeout_center.done_timeouts d JOIN code_effects e USING (biz_id) WHERE d.kind = $1 AND d.result = 'applied')::int AS matched,
                (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = $1 AND NOT (state = 'done' AND result = 'applied'))::int AS other`,
        [CENTER_CODE_KIND],
      );
      expect(rows[0], 'every timeout applied once, history = the effects').toEqual({ effects: n, applied: n, matched: n, other: 0 });
    };
    await seed(1, 1000);
    const workers = [s.spawn('worker', 'worker-1'), s.spawn('worker', 'worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 60_000)));
    s.spawn('coordinator', 'coordinator');
    await s.drained(60_000);
    await check(1000);
    await s.expectBuckets();
    // A worker that dies between its commit (the effect and the marker, in the center) and the
    // record: the re-run finds the marker and records what the first run did, applying nothing.
    for (const w of workers) w.kill('SIGSTOP');
    const victim = s.spawn('worker', 'worker-victim', 'external.after-apply-commit=1*kill');
    await victim.waitForMsg('worker started', 60_000);
    await seed(1001, 1200);
    const exit = await victim.exited;
    expect(exit.signal).toBe('SIGKILL');
    for (const w of workers) w.kill('SIGCONT');
    await s.drained(60_000);
    await check(1200);
    const fromMarker = workers.flatMap((w) => w.lines.filter((l) => /recorded what it did from its marker/.test(String(l.msg))));
    report('citus external: code handler without database', { timeouts: 1200, recordedFromMarker: fromMarker.length });
    expect(fromMarker.length, 'a re-run recorded the dead run from its marker').toBeGreaterThan(0);
  }, 180_000);

  it('a worker SIGKILLed between the business COMMIT and the center record: the re-run records what the first run did from its marker, nothing applied twice', async () => {
    const s = await ExternalScenario.create('kill');
    await s.seed(SQL_KIND, 1, 2000, 10);
    const victim = s.spawn('worker', 'worker-victim', 'external.after-apply-commit=1*kill');
    await victim.waitForMsg('worker started', 60_000);
    s.spawn('coordinator', 'coordinator');
    const exit = await victim.exited;
    expect(exit.signal).toBe('SIGKILL');
    expect(victim.stderr).toContain('failpoint external.after-apply-commit hit: kill');
    const survivor = s.spawn('worker', 'worker-survivor');
    await s.drained(60_000);
    const tally = await s.expectInvariants();
    expect(tally).toEqual({ 'done/applied/closed': 1800, 'done/skipped/paid': 200 });
    await s.expectBuckets();
    const fromMarker = survivor.lines.filter((l) => /recorded what it did from its marker/.test(String(l.msg))).length;
    const rerun = await count(s.center, `SELECT count(*) AS n FROM timeout_center.shards WHERE attempts > 1`);
    const splits = await count(s.center, `SELECT count(*) AS n FROM timeout_center.shards WHERE error_sample LIKE 'split into%'`);
    report('citus external: worker SIGKILLed between the business commit and the record', { tally, fromMarker, shardsRunAgain: rerun, splits });
    expect(fromMarker, 'the re-run recorded the killed run from its marker').toBeGreaterThan(0);
  }, 120_000);

  it("a worker SIGKILLed right after its claim: the re-run fences the target and splits the shard's rows in two in its bucket; the halves close them once", async () => {
    const s = await ExternalScenario.create('split');
    await s.seed(SQL_KIND, 1, 1000, 10);
    const victim = s.spawn('worker', 'worker-victim', 'external.after-claim=1*kill', ['--concurrency', '1']);
    await victim.waitForMsg('worker started', 60_000);
    s.spawn('coordinator', 'coordinator');
    expect((await victim.exited).signal).toBe('SIGKILL');
    const { rows: dead } = await s.center.query<{ shard_id: string; n: number }>(
      `SELECT shard_id::text, count(*)::int AS n FROM timeout_center.timeouts WHERE state = 'dispatched' GROUP BY 1`,
    );
    expect(dead.length, "the killed run's claim committed its rows as dispatched, one shard's").toBe(1);
    const survivor = s.spawn('worker', 'worker-survivor');
    await s.drained(60_000);
    const tally = await s.expectInvariants();
    expect(tally).toEqual({ 'done/applied/closed': 900, 'done/skipped/paid': 100 });
    await s.expectBuckets();
    const { rows: split } = await s.center.query<{ id: string; bucket: number; children: number; child_buckets: number[]; child_rows: number }>(
      `SELECT p.id::text, p.bucket, count(c.id)::int AS children, array_agg(DISTINCT c.bucket) AS child_buckets, sum(c.size)::int AS child_rows
         FROM timeout_center.shards p
         JOIN timeout_center.shards c
           ON c.id = ANY (string_to_array(substring(p.error_sample FROM 'split into shards ([0-9, ]+) after'), ', ')::bigint[])
        WHERE p.id = $1 GROUP BY 1, 2`,
      [dead[0]!.shard_id],
    );
    expect(survivor.lines.some((l) => /shard split in two/.test(String(l.msg)))).toBe(true);
    expect(split).toHaveLength(1);
    expect(split[0]!.children).toBe(2);
    expect(split[0]!.child_buckets, 'the halves keep the bucket').toEqual([split[0]!.bucket]);
    expect(split[0]!.child_rows, "the halves hold the dead run's rows").toBe(dead[0]!.n);
    report('citus external: worker SIGKILLed after its claim, the re-run split', { tally, deadShardRows: dead[0]!.n, split: split[0] });
  }, 120_000);

  it("a kind routed over several business databases (modulo over two): 2,000 due at once, each shard claims one target's rows of one bucket, every unpaid order closed once in its database", async () => {
    const s = await ExternalScenario.create('routed');
    const started = Date.now();
    await s.seed(ROUTED_KIND, 1, 2000, 10);
    // the rule's stamp ran on the worker nodes' shards (sql/citus/routes.sql): every row knows its target
    expect(
      await count(
        s.center,
        `SELECT count(*) AS n FROM timeout_center.timeouts
          WHERE kind = $1::timeout_center.kind AND target IS DISTINCT FROM CASE WHEN biz_id::bigint % 2 = 0 THEN 'orders' ELSE 'orders_b' END`,
        [ROUTED_KIND],
      ),
    ).toBe(0);
    // A rule that changes re-stamps the kind's pending rows on the worker nodes (restamp_targets,
    // sql/citus/routes.sql): swapped, every row's target swaps; swapped back, as before.
    const misplaced = (even: string, odd: string) =>
      count(
        s.center,
        `SELECT count(*) AS n FROM timeout_center.timeouts
          WHERE kind = $1::timeout_center.kind AND target IS DISTINCT FROM CASE WHEN biz_id::bigint % 2 = 0 THEN $2 ELSE $3 END`,
        [ROUTED_KIND, even, odd],
      );
    await s.center.query(`UPDATE timeout_center.kind_routes SET databases = '{orders_b,orders}' WHERE kind = $1`, [ROUTED_KIND]);
    expect(await misplaced('orders_b', 'orders')).toBe(0);
    await s.center.query(`UPDATE timeout_center.kind_routes SET databases = '{orders,orders_b}' WHERE kind = $1`, [ROUTED_KIND]);
    expect(await misplaced('orders', 'orders_b')).toBe(0);
    const workers = [s.spawn('worker', 'worker-1'), s.spawn('worker', 'worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 60_000)));
    s.spawn('coordinator', 'coordinator');
    await s.drained(60_000);
    const drainMs = Date.now() - started;
    const tally = await s.expectInvariants();
    expect(tally).toEqual({ 'done/applied/closed': 1800, 'done/skipped/paid': 200 });
    await s.expectBuckets();
    // even ids (200 of them paid) in orders, odd ones in orders_b
    const closedA = await count(s.orders, `SELECT count(*) AS n FROM orders WHERE status = 'closed'`);
    const closedB = await count(s.ordersB, `SELECT count(*) AS n FROM orders WHERE status = 'closed'`);
    expect([closedA, closedB]).toEqual([800, 1000]);
    const { rows: shards } = await s.center.query<{ target: string; shards: number; buckets: number; rows: number }>(
      `SELECT target, count(*)::int AS shards, count(DISTINCT bucket)::int AS buckets, sum(size)::int AS rows
         FROM timeout_center.shards WHERE kind = $1 GROUP BY target ORDER BY target`,
      [ROUTED_KIND],
    );
    expect(shards.map((r) => [r.target, r.rows])).toEqual([
      ['orders', 1000],
      ['orders_b', 1000],
    ]);
    report('citus external: a kind routed over two business databases, 2,000 due at once', { tally, drainMs, shards });
  }, 120_000);

  it("a payer's cancel while the shard runs in the business database is refused at once, without waiting for the run; the order closes once", async () => {
    const s = await ExternalScenario.create('cancel');
    await s.seed(SQL_KIND, 1, 50, 10);
    // one shard at a time: the rows dispatched while it sleeps are that shard's
    const w = s.spawn('worker', 'worker-slow', 'external.after-apply=1*sleep(2000)', ['--concurrency', '1']);
    await w.waitForMsg('worker started', 60_000);
    s.spawn('coordinator', 'coordinator');
    await waitUntil('the worker in the business transaction', () => w.stderr.includes('failpoint external.after-apply hit'), 30_000, 20);
    const { rows: held } = await s.center.query<{ biz_id: string }>(
      `SELECT biz_id FROM timeout_center.timeouts WHERE state = 'dispatched' AND biz_id::bigint % 10 <> 0 ORDER BY biz_id LIMIT 1`,
    );
    const id = Number(held[0]!.biz_id);
    const asked = Date.now();
    const cancelled = await cancel(s.center, SQL_KIND, id);
    const answeredMs = Date.now() - asked;
    const { rows } = await s.orders.query<{ status: string }>('SELECT status FROM orders WHERE id = $1', [id]);
    expect(cancelled, 'the shard holds the timeout: too late').toBe(false);
    expect(rows[0]!.status, 'answered before the run committed in the business database').toBe('unpaid');
    s.spawn('worker', 'worker-2');
    await s.drained(60_000);
    const tally = await s.expectInvariants();
    expect(tally).toEqual({ 'done/applied/closed': 45, 'done/skipped/paid': 5 });
    report("citus external: a payer's cancel during the business transaction", { tally, answeredMs, order: id });
    expect(answeredMs, 'the cancel did not wait for the 2 s in the business transaction').toBeLessThan(1500);
  }, 120_000);
});
