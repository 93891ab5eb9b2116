// PostgreSQL failover under a real HA manager (issue 35): pg_auto_failover's monitor and two data
// nodes (test/helpers/pg-auto-failover.ts), the center's database on them, every process given
// the formation's multi-host URL (target_session_attrs=read-write). Under the 50,000 burst of
// ha-burst.ts (two coordinators, two workers), with payers paying orders from the due instant on,
// the primary's machine dies (its keeper and PostgreSQL SIGKILLed); the monitor promotes the
// standby; the engine finds it through the same URL. Ends with I1-I4, history = business truth
// (every payment acknowledged to a payer is there and was never closed; an order is closed iff
// exactly one of its timeouts was applied), and the gap in closes after the new primary accepted
// writes (goal: under 5 s). Then the same with a business database on the external path, and with
// a store (timeouts beside the orders, led by a coordinator on its own) on the formation.
import type pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { REJOIN_MS, startFormation, type Formation } from '../helpers/pg-auto-failover.js';
import { stopAllServers } from '../helpers/servers.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { requireTools } from '../helpers/system-tools.js';
import { BURST, midDrain, startBurst, type Burst } from './ha-burst.js';
import { KIND, report, sleep, waitUntil } from './harness.js';

const tools = requireTools('pg-auto-failover');
const PAYERS = 6;
const BIZ_N = 20_000;
const silent = pino({ level: 'silent' });
let formation: Formation | undefined;
let burst: Burst | undefined;
let center: TestDatabase | undefined;
const centers: TestDatabase[] = [];
const pools: pg.Pool[] = [];

afterAll(async () => {
  await killAll();
  await burst?.s.close();
  for (const p of pools) await p.end().catch(() => {});
  await center?.drop().catch(() => {});
  for (const c of centers) await c.drop().catch(() => {});
  await stopAllServers();
});

/** Payers through a multi-host URL: from `from` on, each pays random unpaid orders of [1, n], one
 *  statement each, until stop(). A payment whose statement failed (the server went away) may or
 *  may not have committed: counted as failed, not acknowledged. */
function payers(url: string, n: number, from: number): { stop(): Promise<{ acknowledged: Set<number>; refused: number; failed: number }> } {
  const pool = createPool({ connectionString: url, max: PAYERS, applicationName: 'payer', logger: silent });
  const acknowledged = new Set<number>();
  const tried = new Set<number>();
  let refused = 0;
  let failed = 0;
  let paying = true;
  const payer = async () => {
    await sleep(Math.max(0, from - Date.now()));
    while (paying) {
      const id = 1 + Math.floor(Math.random() * n);
      if (tried.has(id)) continue;
      tried.add(id);
      try {
        const r = await pool.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
        if (r.rowCount === 1) acknowledged.add(id);
        else refused++;
      } catch {
        failed++;
        await sleep(50);
      }
    }
  };
  const tasks = Array.from({ length: PAYERS }, payer);
  return {
    async stop() {
      paying = false;
      await Promise.all(tasks);
      await pool.end();
      return { acknowledged, refused, failed };
    },
  };
}

/** When the promoted node accepted writes (monitor promoted it and lifted its read-only guard). */
async function writable(port: number, since: Date): Promise<Date> {
  const probe = createPool({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, max: 1, applicationName: 'probe', logger: silent });
  try {
    while (Date.now() - since.getTime() < 90_000) {
      const ok = await probe
        .query<{ ok: boolean }>(`SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS ok`)
        .then((r) => r.rows[0]!.ok)
        .catch(() => false);
      if (ok) return new Date();
      await sleep(50);
    }
    throw new Error('the monitor did not promote the standby within 90 s');
  } finally {
    await probe.end();
  }
}

describe.skipIf(tools.skip)(tools.title('PostgreSQL failover by pg_auto_failover'), () => {
  beforeAll(async () => {
    formation = await startFormation('center');
  }, 240_000);

  it("the center's primary dies under a 50,000 burst with payers at the due instant; the monitor promotes the standby; closes resume through the multi-host URL", async () => {
    const f = formation!;
    const url = f.url('center');
    const before = await f.primary();
    const standby = f.nodes.find((n) => n.name !== before.name)!;
    const dueInMs = 3000;
    burst = await startBurst('pgaf-center', { REDIS_URL: TEST_REDIS_URL }, { databaseUrl: url, dueInMs });
    const b = burst;
    const dueAt = Date.now() + dueInMs - 500;

    // Payers through the same multi-host URL, from the due instant until after the failover.
    const pay = payers(url, BURST, dueAt);
    await midDrain(b, 0.2);
    const at = new Date();
    await f.kill(before);
    const answeringAt = await writable(standby.port, at);
    await sleep(1000);
    const payments = await pay.stop();
    const acknowledged = payments.acknowledged;

    const figures = await b.finish('pg_auto_failover: center primary SIGKILLed under the burst', {
      at,
      answeringAt,
      extra: { payments: { acknowledged: acknowledged.size, refused: payments.refused, failed: payments.failed }, states: await f.states() },
    });
    // History = business truth.
    const s = b.s;
    const lostPayments = await s.count(
      `SELECT count(*) AS n FROM unnest($1::bigint[]) id LEFT JOIN orders o USING (id) WHERE o.status IS DISTINCT FROM 'paid'`,
      [[...acknowledged]],
    );
    expect(lostPayments, 'every payment acknowledged to a payer survived the failover, unclosed').toBe(0);
    const mismatched = await s.count(
      `SELECT count(*) AS n FROM orders o
        WHERE (o.status = 'closed') <> EXISTS (SELECT 1 FROM timeout_center.all_timeouts t WHERE t.biz_id = o.id::text AND t.state = 'done' AND t.result = 'applied')`,
    );
    expect(mismatched, 'an order is closed iff one of its timeouts was applied').toBe(0);
    expect((await f.primary()).name).toBe(standby.name);
    const resume = (figures['allKinds'] as { closesResumeAfterAnswerMs: number }).closesResumeAfterAnswerMs;
    expect(resume, 'closes resumed after the new primary accepted writes').toBeGreaterThanOrEqual(0);
  });
  it(
    'a business database on the external path fails over under a 20,000 burst with payers: the workers find its new primary, no effect doubled or lost',
    async () => {
      const f = formation!;
      const ordersUrl = await freshDatabase(f, 'orders');
      const orders = createPool({ connectionString: ordersUrl, max: 4, applicationName: 'fault test', logger: silent });
      pools.push(orders);
      await createOrdersSchema(orders);
      center = await createTestDatabase('pgaf-biz-center');
      const centerPool = createPool({ connectionString: center.url, max: 4, applicationName: 'fault test', logger: silent });
      pools.push(centerPool);
      const config = fleetConfig('pgaf-biz', { orders: { url: ordersUrl, poolSize: 4 } }, { database: 'orders' });
      const procs = await startFleet(config, center.url);

      const started = Date.now();
      await orders.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, $1::int) g`, [BIZ_N]);
      await centerPool.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() + interval '2 seconds' FROM generate_series(1, $2::int) g`,
        [KIND, BIZ_N],
      );
      const fault = await failOverMidDrain(f, ordersUrl, orders);
      await drained(centerPool, procs);
      for (const p of procs) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
      const truth = await businessTruth(orders, centerPool, fault.payments.acknowledged);
      // A marker is deleted after the center recorded its shard, best effort: one whose delete met
      // the dead primary stays, harmless (a recorded shard's marker is never read again).
      const markerShards = (await orders.query<{ id: number }>('SELECT shard_id AS id FROM timeout_center.markers')).rows.map((r) => Number(r.id));
      const unrecorded = Number(
        (
          await centerPool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM unnest($1::bigint[]) id LEFT JOIN timeout_center.shards sh USING (id) WHERE sh.state IS DISTINCT FROM 'done'`,
            [markerShards],
          )
        ).rows[0]!.n,
      );
      expect(unrecorded, 'every marker left belongs to a shard the center recorded').toBe(0);
      const gaps = await closeGaps(orders, fault.at, fault.answeringAt);
      await Promise.all(procs.map((p) => p.stop(10_000)));
      report('pg_auto_failover: business database primary SIGKILLed under the burst (external path)', {
        timeouts: BIZ_N,
        ...truth,
        markersLeft: markerShards.length,
        answeringAfterFaultMs: fault.answeringAt.getTime() - fault.at.getTime(),
        ...gaps,
        payments: { acknowledged: fault.payments.acknowledged.size, refused: fault.payments.refused, failed: fault.payments.failed },
        wallMs: Date.now() - started,
      });
    },
    REJOIN_MS + 120_000,
  );

  it(
    'a store (timeouts beside the orders) fails over under a 20,000 burst with payers: its leader and workers find the new primary, no effect doubled or lost',
    async () => {
      const f = formation!;
      const storeUrl = await freshDatabase(f, 'store_a');
      const store = createPool({ connectionString: storeUrl, max: 4, applicationName: 'fault test', logger: silent });
      pools.push(store);
      await createOrdersSchema(store);
      const storeCenter = await createTestDatabase('pgaf-store-center');
      centers.push(storeCenter);
      const config = fleetConfig(
        'pgaf-store',
        { store_a: { url: storeUrl, poolSize: 4 } },
        { store: 'beside', route: { by: 'modulo', databases: ['store_a'] } },
      );
      const procs = await startFleet(config, storeCenter.url);

      const started = Date.now();
      // Section 3's SQL in the order's own database: the orders and their timeouts, in the store.
      await store.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, $1::int) g`, [BIZ_N]);
      await store.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() + interval '2 seconds' FROM generate_series(1, $2::int) g`,
        [KIND, BIZ_N],
      );
      const fault = await failOverMidDrain(f, storeUrl, store);
      await drained(store, procs);
      for (const p of procs) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
      const truth = await businessTruth(store, store, fault.payments.acknowledged);
      const gaps = await closeGaps(store, fault.at, fault.answeringAt);
      await Promise.all(procs.map((p) => p.stop(10_000)));
      report('pg_auto_failover: a store primary SIGKILLed under the burst (timeouts beside the orders)', {
        timeouts: BIZ_N,
        ...truth,
        answeringAfterFaultMs: fault.answeringAt.getTime() - fault.at.getTime(),
        ...gaps,
        payments: { acknowledged: fault.payments.acknowledged.size, refused: fault.payments.refused, failed: fault.payments.failed },
        wallMs: Date.now() - started,
      });
    },
    REJOIN_MS + 120_000,
  );
});

/** A database of its own on the formation, after the previous scenario's dead node rejoined as a
 *  secondary (so each scenario starts with a primary and a standby). */
async function freshDatabase(f: Formation, name: string): Promise<string> {
  const alive = await f.primary();
  const dead = f.nodes.find((n) => n.name !== alive.name)!;
  await f.rejoin(dead);
  const admin = createPool({ connectionString: f.url('postgres'), max: 1, applicationName: 'admin', logger: silent });
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  return f.url(name);
}

/** The fleet's config: one kind closing orders in the given databases (external path or stores). */
function fleetConfig(
  prefix: string,
  businessDatabases: Record<string, { url: string; poolSize: number }>,
  placement: { database: string } | { store: 'beside'; route: { by: 'modulo'; databases: string[] } },
): string {
  const database = 'database' in placement ? placement.database : undefined;
  const { route, store } = 'store' in placement ? placement : { route: undefined, store: undefined };
  return writeConfig({
    redisKeyPrefix: testKeyPrefix(prefix),
    poolSize: 3,
    businessDatabases,
    breaker: { consecutiveFailures: 3, halfOpenAfterMs: 1000, maxRetryDelayMs: 2000 },
    kinds: {
      [KIND]: {
        ...(store ? { store } : {}),
        shardSize: 500,
        maxAttempts: 5,
        backoffMs: 200,
        timeLimitMs: 2000,
        handler: { type: 'sql', sql: CLOSE_SQL, ...(database ? { database } : {}), ...(route ? { route } : {}) },
      },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 16, minTickIntervalMs: 50 },
    worker: { leaseMs: 3000, blockMs: 200, concurrency: 4, drainTimeoutMs: 3000 },
  });
}

/** migrate, then two coordinators and two workers as CLI processes. */
async function startFleet(config: string, centerUrl: string): Promise<CliProcess[]> {
  const env = { DATABASE_URL: centerUrl, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', config], env);
  expect(migrated.code, migrated.stderr).toBe(0);
  const procs = [
    spawnCli('coordinator-a', ['coordinator', '--config', config], env),
    spawnCli('coordinator-b', ['coordinator', '--config', config], env),
    spawnCli('worker-1', ['worker', '--config', config], env),
    spawnCli('worker-2', ['worker', '--config', config], env),
  ];
  await Promise.any(procs.slice(0, 2).map((c) => c.waitForMsg('became leader', 30_000))).catch(() => {
    throw new Error(`no coordinator became leader: ${procs.map((p) => `${p.name}: ${JSON.stringify(p.lines.slice(-3))} ${p.stderr.slice(-300)}`).join('\n')}`);
  });
  await Promise.all(procs.slice(2).map((w) => w.waitForMsg('worker started', 20_000)));
  return procs;
}

const closedCount = async (orders: pg.Pool) =>
  Number((await orders.query<{ n: number }>(`SELECT count(*)::int AS n FROM order_transitions WHERE to_status = 'closed'`)).rows[0]!.n);

/** Payers from the due instant on; at 20 % of the drain the primary's machine dies; waits until
 *  the monitor's promoted standby accepts writes, then a second more of payments. */
async function failOverMidDrain(f: Formation, url: string, orders: pg.Pool) {
  const pay = payers(url, BIZ_N, Date.now() + 1500);
  await waitUntil('the drain under way', async () => (await closedCount(orders).catch(() => 0)) >= BIZ_N * 0.2, 60_000, 20);
  const before = await f.primary();
  const standby = f.nodes.find((n) => n.name !== before.name)!;
  const at = new Date();
  await f.kill(before);
  const answeringAt = await writable(standby.port, at);
  await sleep(1000);
  const payments = await pay.stop();
  expect((await f.primary()).name).toBe(standby.name);
  return { at, answeringAt, payments };
}

/** Every timeout final and every scan reduced, in the database that holds them. On a timeout,
 *  the error says what was left and what each process logged last. */
async function drained(history: pg.Pool, procs: CliProcess[]): Promise<void> {
  const waiting = waitUntil(
    'every timeout final and every scan reduced',
    async () =>
      Number(
        (
          await history.query<{ n: number }>(
            `SELECT ((SELECT count(*) FROM timeout_center.all_timeouts WHERE state NOT IN ('done', 'cancelled', 'failed'))
                    + (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced'))::int AS n`,
          )
        ).rows[0]!.n,
      ) === 0,
    90_000,
    250,
  );
  await waiting.catch(async (e: Error) => {
    const count = (sql: string) =>
      history
        .query<{ state: string; n: number }>(sql)
        .then((r) => JSON.stringify(r.rows))
        .catch((q: Error) => `(could not read: ${q.message})`);
    const left = [
      `timeouts ${await count(`SELECT state::text, count(*)::int AS n FROM timeout_center.all_timeouts WHERE state NOT IN ('done', 'cancelled', 'failed') GROUP BY 1`)}`,
      `scans ${await count(`SELECT state::text, count(*)::int AS n FROM timeout_center.scans WHERE state <> 'reduced' GROUP BY 1`)}`,
      `shards ${await count(`SELECT state::text, count(*)::int AS n FROM timeout_center.shards GROUP BY 1`)}`,
    ].join('; ');
    const logs = procs
      .map(
        (p) =>
          `${p.name} alive=${p.alive}: ${p.lines
            .slice(-12)
            .map((l) => JSON.stringify(l))
            .join('\n  ')}`,
      )
      .join('\n');
    throw new Error(`${e.message}\nleft: ${left}\n${logs}`);
  });
}

/** I1-I4 and history = business truth: no order closed twice or after payment; the history's
 *  applied rows are exactly the closed orders; every order closed or paid; I4 honest; every
 *  payment acknowledged to a payer survived the failover. */
async function businessTruth(orders: pg.Pool, history: pg.Pool, acknowledged: Set<number>): Promise<{ applied: number; paid: number }> {
  const inv = (
    await orders.query<{ doubled: number; wrong: number; closed: number; paid: number }>(`
      SELECT (SELECT count(*) FROM (SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1) x)::int AS doubled,
             (SELECT count(*) FROM order_transitions WHERE from_status = 'paid')::int AS wrong,
             (SELECT count(*) FROM order_transitions WHERE to_status = 'closed')::int AS closed,
             (SELECT count(*) FROM orders WHERE status = 'paid')::int AS paid`)
  ).rows[0]!;
  expect(inv).toMatchObject({ doubled: 0, wrong: 0 });
  const h = (
    await history.query<{ applied: number; failed: number; mismatch: number }>(`
      SELECT (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied')::int AS applied,
             (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed')::int AS failed,
             ((SELECT coalesce(sum(failed), 0) FROM timeout_center.scans) - (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed'))::int AS mismatch`)
  ).rows[0]!;
  expect(h, 'I4 honest; nothing failed for good').toMatchObject({ failed: 0, mismatch: 0 });
  expect(h.applied, 'applied in the history = closed in the business database').toBe(inv.closed);
  expect(h.applied + inv.paid, 'every order closed or paid').toBe(BIZ_N);
  const appliedIds = (
    await history.query<{ id: string }>(`SELECT biz_id AS id FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied'`)
  ).rows.map((r) => r.id);
  const mismatched = Number(
    (await orders.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE (status = 'closed') <> (id::text = ANY($1::text[]))`, [appliedIds]))
      .rows[0]!.n,
  );
  expect(mismatched, 'an order is closed iff its timeout was applied').toBe(0);
  const lostPayments = Number(
    (
      await orders.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM unnest($1::bigint[]) id LEFT JOIN orders o USING (id) WHERE o.status IS DISTINCT FROM 'paid'`,
        [[...acknowledged]],
      )
    ).rows[0]!.n,
  );
  expect(lostPayments, 'every acknowledged payment survived').toBe(0);
  return { applied: h.applied, paid: inv.paid };
}

/** The longest gap between closes from the fault on, and when closes resumed after the new
 *  primary accepted writes (goal: under 5 s). */
async function closeGaps(orders: pg.Pool, at: Date, answeringAt: Date): Promise<{ longestGapMs: number; closesResumeAfterAnswerMs: number }> {
  const { rows } = await orders.query<{ gap: number | null; resume: number | null }>(
    `WITH c AS (SELECT at, lag(at) OVER (ORDER BY at) AS prev FROM order_transitions WHERE to_status = 'closed')
     SELECT (SELECT max(extract(epoch FROM at - greatest(prev, $1)) * 1000) FROM c WHERE at >= $1)::float8 AS gap,
            (SELECT extract(epoch FROM min(at) - $2) * 1000 FROM c WHERE at >= $2)::float8 AS resume`,
    [at, answeringAt],
  );
  return { longestGapMs: Math.round(rows[0]!.gap ?? 0), closesResumeAfterAnswerMs: Math.round(rows[0]!.resume ?? -1) };
}
