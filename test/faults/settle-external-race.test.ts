// Settle on read for kinds whose handler runs outside the center's database (issue 33), racing the
// scan at the due instant, with real components: the center in its own database, the orders in a
// second one (a business database the center does not own), a real local HTTP service, two worker
// processes and a coordinator. Two kinds:
//   - order.biz: a SQL handler in the orders database (handler.database), settled with the Node
//     API (Settler, in this process);
//   - order.http: an HTTP handler (the local service closes the orders it is posted), settled over
//     the HTTP API (a `timeout-center api` process).
// At the instant the orders fall due, both workers apply their shards (each holding its business
// commit 300 ms, and the HTTP service answering after 150 ms, so settles meet rows a shard holds),
// four readers settle every order in their own random order, and two payers pay a fifth of the
// orders (half cancel the timeout first, as the payment protocol says, the other half only pay,
// guarded). Both handlers are not idempotent: they add one to orders.closes each time they run on
// an order (guarded against paid orders only, not against closed ones), so a second application
// anywhere would show. After the drain: each order changed at most once, closes is 1 exactly for
// the orders the history says were applied (by a shard or a settle), a paid order was never
// closed, every marker left in the orders database belongs to a recorded shard, and for each kind
// both a shard and a settle applied some.
// Then a settler killed between the business commit and its record: a worker takes its shard over
// and records it from the marker (applied once, recorded once).
import { createServer, type Server } from 'node:http';
import type pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, type ConfigInput } from '../../src/config.js';
import { cancel } from '../../src/schedule.js';
import { Settler } from '../../src/settle/settler.js';
import type { SettleOutcome } from '../../src/settle/settle.js';
import { createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { report, sleep, waitUntil } from './harness.js';
import { quietPool } from '../helpers/quiet-pool.js';

const BIZ = 'order.biz';
const HTTP = 'order.http';
const N = 300; // orders per kind: order.biz 1..N, order.http N+1..2N
const NON_IDEMPOTENT = "UPDATE orders SET status = 'closed', closes = closes + 1 WHERE id = ANY($1::bigint[]) AND status <> 'paid' RETURNING id::text";

let center: TestDatabase;
let orders: TestDatabase;
let centerPool: pg.Pool;
let ordersPool: pg.Pool;
let readers: pg.Pool;
let service: Server;
let settler: Settler | undefined;
let configPath: string;
let env: Record<string, string | undefined>;
const procs: CliProcess[] = [];
const posts: { key: string | undefined; ids: string[]; applied: string[] }[] = [];

function shuffled(from: number, n: number): number[] {
  const ids = Array.from({ length: n }, (_, i) => from + i);
  for (let i = ids.length - 1; i > 0; i -= 1) {
    const j = Math.floor(Math.random() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  return ids;
}

beforeAll(async () => {
  center = await createTestDatabase('settle-ext-center');
  orders = await createTestDatabase('settle-ext-orders');
  centerPool = quietPool(center.url);
  ordersPool = quietPool(orders.url, 8);
  await createOrdersSchema(ordersPool);
  await ordersPool.query('ALTER TABLE orders ADD COLUMN closes integer NOT NULL DEFAULT 0');
  // The HTTP kind's service: runs the non-idempotent close in the orders database for what it is posted.
  service = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const items = (JSON.parse(body) as { items: { bizId: string }[] }).items;
      const post = { key: req.headers['idempotency-key'] as string | undefined, ids: items.map((i) => i.bizId), applied: [] as string[] };
      posts.push(post);
      sleep(150)
        .then(() => ordersPool.query<{ id: string }>(NON_IDEMPOTENT, [items.map((i) => i.bizId)]))
        .then(({ rows }) => {
          post.applied = rows.map((r) => r.id);
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ applied: post.applied }));
        })
        .catch(() => res.writeHead(500).end());
    });
  });
  await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
  const servicePort = (service.address() as { port: number }).port;
  // A time limit well above what a loaded box takes: an HTTP call past its limit is retried by
  // design (at least once: a service must apply an order once by its own guard), which this
  // service's non-idempotent close would show as a double of its own, not of settle's.
  const kind = { shardSize: 50, maxAttempts: 3, backoffMs: 200, timeLimitMs: 20_000 };
  const config: ConfigInput = {
    redisKeyPrefix: testKeyPrefix('settle-ext'),
    poolSize: 4,
    businessDatabases: { orders: { url: orders.url, poolSize: 6 } },
    kinds: {
      [BIZ]: { ...kind, handler: { type: 'sql', sql: NON_IDEMPOTENT, database: 'orders' } },
      [HTTP]: { ...kind, handler: { type: 'http', url: `http://127.0.0.1:${servicePort}/close` } },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: 30_000, blockMs: 200, concurrency: 2, drainTimeoutMs: 3000 },
    alerts: { lagSlaMs: 600_000 },
  };
  configPath = writeConfig(config);
  env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env);
  if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
}, 120_000);

afterAll(async () => {
  await settler?.close();
  await killAll();
  for (const p of [centerPool, ordersPool, readers]) await p?.end().catch(() => {});
  await center?.drop().catch(() => {});
  await orders?.drop().catch(() => {});
  service?.close();
});

describe('settle on read for a business-database kind and an HTTP kind, racing two workers and a payer', () => {
  it('never applies a timeout twice, and the history equals the orders', async () => {
    const spawn = (name: string, args: string[], failpoints?: string) => {
      const p = spawnCli(name, args, { ...env, TC_FAILPOINTS: failpoints });
      procs.push(p);
      return p;
    };
    const workers = [1, 2].map((i) => spawn(`worker-${i}`, ['worker', '--config', configPath], 'external.before-business-commit=sleep(300)'));
    const apiPort = await freePort();
    const api = spawn('api', ['api', '--config', configPath, '--port', String(apiPort)]);
    await Promise.all([...workers.map((w) => w.waitForMsg('worker started', 60_000)), api.waitForMsg('api listening', 60_000)]);
    const coordinator = spawn('coordinator', ['coordinator', '--config', configPath]);
    await coordinator.waitForMsg('became leader', 15_000);

    settler = new Settler({ config: loadConfig({ path: configPath, env }), pool: centerPool, logger: pino({ level: 'silent' }) });
    readers = quietPool(center.url, 6);
    const DUE_IN = 2500;
    await ordersPool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, $1::int) g`, [2 * N]);
    await centerPool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT CASE WHEN g <= $1 THEN $2 ELSE $3 END, g::text, now() + $4 * interval '1 millisecond' FROM generate_series(1, 2 * $1::int) g`,
      [N, BIZ, HTTP, DUE_IN],
    );
    const { rows: due } = await centerPool.query<{ ms: number }>(`SELECT extract(epoch FROM min(due_at) - now()) * 1000 AS ms FROM timeout_center.timeouts`);
    const dueAt = Date.now() + Number(due[0]!.ms);

    const outcomes: Record<string, Record<string, number>> = { [BIZ]: {}, [HTTP]: {} };
    const details: string[] = [];
    const count = (kind: string, o: SettleOutcome, detail: string | undefined) => {
      outcomes[kind]![o] = (outcomes[kind]![o] ?? 0) + 1;
      if ((o === 'failed' || o === 'unsupported') && details.length < 5) details.push(`${kind} ${o}: ${detail}`);
    };
    const viaNode = async (id: number) => {
      const r = await settler!.settle(BIZ, id, { waitMs: 50 });
      return { outcome: r.outcome, detail: r.detail };
    };
    const viaHttp = async (id: number) => {
      const res = await fetch(`http://127.0.0.1:${apiPort}/v1/timeouts/${HTTP}/${id}/settle`, { method: 'POST' });
      const body = (await res.json()) as { outcome: SettleOutcome; detail?: string; error?: unknown };
      if (res.status !== 200) throw new Error(`settle over HTTP answered ${res.status}: ${JSON.stringify(body)}`);
      return body;
    };
    const reader = async (kind: string, from: number, call: (id: number) => Promise<{ outcome: SettleOutcome; detail?: string | undefined }>) => {
      await sleep(Math.max(0, dueAt - Date.now() - 300));
      for (const id of shuffled(from, N)) {
        for (;;) {
          const r = await call(id);
          count(kind, r.outcome, r.detail);
          if (r.outcome !== 'not_due') break;
          await sleep(2);
        }
      }
    };
    const paid = new Set<number>();
    const payer = async (ids: number[]): Promise<void> => {
      await sleep(Math.max(0, dueAt - Date.now() - 30));
      for (const id of ids) {
        const kind = id <= N ? BIZ : HTTP;
        // The payment protocol: cancel the timeout first (refused, UPDATE 0, while a shard holds
        // it), then the guarded payment, whose row count decides.
        if (id % 2 === 0) await cancel(readers, kind, id);
        const p = await ordersPool.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid' RETURNING id`, [id]);
        if (p.rowCount === 1) paid.add(id);
      }
    };
    const toPay = shuffled(1, 2 * N).slice(0, (2 * N) / 5);
    await Promise.all([
      reader(BIZ, 1, viaNode),
      reader(BIZ, 1, viaNode),
      reader(HTTP, N + 1, viaHttp),
      reader(HTTP, N + 1, viaHttp),
      payer(toPay.slice(0, N / 5)),
      payer(toPay.slice(N / 5)),
    ]);

    await waitUntil(
      'every due timeout final and every scan reduced',
      async () =>
        (
          await centerPool.query<{ n: number }>(
            `SELECT (SELECT count(*) FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed'))
                  + (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced') AS n`,
          )
        ).rows[0]!.n == 0,
      60_000,
      250,
    );
    const { rows: history } = await centerPool.query<{ kind: string; biz_id: string; result: string; settled_by: string | null; shard_id: string | null }>(
      `SELECT kind, biz_id, result, settled_by, shard_id FROM timeout_center.all_timeouts WHERE state = 'done'`,
    );
    const { rows: orderRows } = await ordersPool.query<{ id: string; status: string; closes: number }>('SELECT id::text, status, closes FROM orders');
    const doneOf = new Map<string, { applied: number; settled: number; n: number }>();
    for (const h of history) {
      const e = doneOf.get(h.biz_id) ?? { applied: 0, settled: 0, n: 0 };
      e.n += 1;
      if (h.result === 'applied') e.applied += 1;
      if (h.result === 'applied' && h.settled_by !== null) e.settled += 1;
      doneOf.set(h.biz_id, e);
    }
    const doubled = orderRows.filter((o) => o.closes > 1);
    const untrue = orderRows.filter((o) => o.closes !== (doneOf.get(o.id)?.applied ?? 0) || (doneOf.get(o.id)?.n ?? 0) > 1);
    const paidClosed = orderRows.filter((o) => o.status === 'paid' && o.closes > 0);
    const by = (kind: string, settled: boolean) =>
      history.filter((h) => h.kind === kind && h.result === 'applied' && (h.settled_by !== null) === settled).length;
    // Settle shards a worker ran again (their settler's lease taken over): 0 unless a settler stalled.
    const { rows: rerun } = await centerPool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM timeout_center.shards WHERE settled_by IS NOT NULL AND attempts > 1`,
    );
    const figures = {
      settleShardsRerun: rerun[0]!.n,
      outcomes,
      details,
      paid: paid.size,
      appliedBySettle: { [BIZ]: by(BIZ, true), [HTTP]: by(HTTP, true) } as Record<string, number>,
      appliedByShard: { [BIZ]: by(BIZ, false), [HTTP]: by(HTTP, false) } as Record<string, number>,
      posts: posts.length,
    };
    report('settle external race', figures);
    if (doubled.length > 0) {
      const ids = doubled.map((o) => o.id);
      const { rows: trail } = await centerPool.query(
        `SELECT a.biz_id, a.state, a.result, a.shard_id, a.settled_by, a.attempts, a.last_error, sh.owner, sh.attempts AS shard_attempts, sh.state AS shard_state
           FROM timeout_center.all_timeouts a LEFT JOIN timeout_center.shards sh ON sh.id = a.shard_id WHERE a.biz_id = ANY($1)`,
        [ids],
      );
      console.log('doubled:', JSON.stringify(trail), JSON.stringify(posts.filter((p) => p.ids.some((i) => ids.includes(i)))));
      for (const p of procs) console.log(p.name, JSON.stringify(p.lines.filter((l) => (l.level ?? 0) >= 40).slice(-6)));
    }
    expect(doubled, 'orders a handler ran on twice').toEqual([]);
    expect(untrue, 'orders whose closes differ from their applied history').toEqual([]);
    expect(paidClosed, 'paid orders closed').toEqual([]);
    expect(orderRows.filter((o) => paid.has(Number(o.id)) && o.status !== 'paid')).toEqual([]);
    // Every marker left in the orders database belongs to a shard the center recorded.
    const markers = (await ordersPool.query<{ id: string }>('SELECT shard_id AS id FROM timeout_center.markers')).rows.map((r) => Number(r.id));
    const { rows: unrecorded } = await centerPool.query(
      `SELECT id FROM unnest($1::bigint[]) id LEFT JOIN timeout_center.shards sh USING (id) WHERE sh.state IS DISTINCT FROM 'done'`,
      [markers],
    );
    expect(unrecorded, 'markers of unrecorded shards').toEqual([]);
    // I4: the reduced scans' failed totals (settle's one-shard scans included) equal the failed rows.
    const { rows: i4 } = await centerPool.query<{ n: number }>(
      `SELECT ((SELECT coalesce(sum(failed), 0) FROM timeout_center.scans WHERE state = 'reduced')
             - (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed'))::int AS n`,
    );
    expect(i4[0]!.n, 'I4: reduce totals honest').toBe(0);
    // The race happened, for each kind: a settle and a shard each applied some, and payers paid.
    for (const kind of [BIZ, HTTP]) {
      expect(figures.appliedBySettle[kind], `${kind} applied by a settle (${details.join('; ')})`).toBeGreaterThan(0);
      expect(figures.appliedByShard[kind], `${kind} applied by a shard`).toBeGreaterThan(0);
      expect(outcomes[kind]!['unsupported'] ?? 0, `${kind} answered unsupported`).toBe(0);
    }
    expect(paid.size).toBeGreaterThan(0);
    await Promise.all(procs.filter((p) => p.alive).map((p) => p.stop(10_000)));
  }, 180_000);

  it('a settler killed between the business commit and its record: a worker takes its shard over and records it from the marker, once', async () => {
    const spawn = (name: string, args: string[], failpoints?: string) => {
      const p = spawnCli(name, args, { ...env, TC_FAILPOINTS: failpoints });
      procs.push(p);
      return p;
    };
    const worker = spawn('worker-3', ['worker', '--config', configPath]);
    const apiPort = await freePort();
    const api = spawn('api-killed', ['api', '--config', configPath, '--port', String(apiPort)], 'external.after-apply-commit=1*kill');
    await Promise.all([worker.waitForMsg('worker started', 60_000), api.waitForMsg('api listening', 60_000)]);
    const id = 10_001;
    await ordersPool.query(`INSERT INTO orders (id, status) VALUES ($1, 'unpaid')`, [id]);
    // Due, and no coordinator yet: no shard of the scan can hold it, the settle binds it.
    await centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, $2, now() - interval '1 second')`, [BIZ, String(id)]);
    const res = await fetch(`http://127.0.0.1:${apiPort}/v1/timeouts/${BIZ}/${id}/settle`, { method: 'POST' }).catch((err: unknown) => err as Error);
    // The API process died answering: the order closed in the orders database, the center not told.
    expect(res).toBeInstanceOf(Error);
    expect((await api.exited).signal).toBe('SIGKILL');
    const { rows: closed } = await ordersPool.query<{ closes: number }>('SELECT closes FROM orders WHERE id = $1', [id]);
    expect(closed[0]!.closes).toBe(1);
    // The reaper sees the settler's heartbeat stop and hands its shard to a worker, whose run finds
    // the marker and records what the settler's run did, without applying again.
    const coordinator = spawn('coordinator-2', ['coordinator', '--config', configPath]);
    await coordinator.waitForMsg('became leader', 15_000);
    await waitUntil(
      'the settle recorded',
      async () => (await centerPool.query(`SELECT 1 FROM timeout_center.done_timeouts WHERE kind = $1 AND biz_id = $2`, [BIZ, String(id)])).rowCount === 1,
      60_000,
      250,
    );
    const { rows: history } = await centerPool.query(
      `SELECT d.result, sh.settled_by IS NOT NULL AS settle_shard, sh.attempts, sh.state FROM timeout_center.done_timeouts d
         JOIN timeout_center.shards sh ON sh.id = d.shard_id WHERE d.kind = $1 AND d.biz_id = $2`,
      [BIZ, String(id)],
    );
    expect(history).toEqual([{ result: 'applied', settle_shard: true, attempts: 2, state: 'done' }]);
    const { rows: after } = await ordersPool.query<{ closes: number }>('SELECT closes FROM orders WHERE id = $1', [id]);
    expect(after[0]!.closes).toBe(1);
    expect(worker.lines.some((l) => /recorded what it did from its marker/.test(String(l.msg)))).toBe(true);
    await Promise.all(procs.filter((p) => p.alive).map((p) => p.stop(10_000)));
  }, 120_000);
});
