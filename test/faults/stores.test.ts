// Timeouts stored beside the orders they close (issue 27): three PostgreSQL instances, each the
// orders shard and the timeout store of the orders `id % 3` routes to it, with real coordinator and
// worker processes. Services write the README's way in the order's own database (insert with the
// order; pay with a cancel then a guarded update); every scenario ends with the invariants per
// store: nothing lost, one effect per order, no paid order closed, reduce totals = rows.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, waitForDrain, writeConfig, type Invariants } from '../helpers/orders.js';
import { CLI, killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { startPostgres, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { forOrder, namedBlock } from '../docs/readme-blocks.js';
import { report, sleep, waitUntil } from './harness.js';

const KIND = 'order.unpaid';
const STORES = ['orders_0', 'orders_1', 'orders_2'] as const;

let servers: PostgresServer[] = [];
let pools: pg.Pool[] = [];
let center: TestDatabase;
let centerPool: pg.Pool;
let configPath: string;
let env: Record<string, string | undefined>;
let procs: CliProcess[] = [];
let nextOrder = 1;

beforeAll(async () => {
  servers = await Promise.all(STORES.map(() => startPostgres()));
  pools = servers.map((s) => new pg.Pool({ connectionString: s.url(), max: 8 }));
  for (const p of pools) p.on('error', () => {});
  await Promise.all(pools.map((p) => createOrdersSchema(p)));
  center = await createTestDatabase('stores');
  centerPool = new pg.Pool({ connectionString: center.url, max: 4 });
  configPath = writeConfig({
    redisKeyPrefix: testKeyPrefix('stores'),
    poolSize: 3,
    kinds: {
      [KIND]: {
        store: 'beside',
        shardSize: 500,
        maxAttempts: 5,
        backoffMs: 100,
        timeLimitMs: 2000,
        handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: [...STORES] } },
      },
    },
    businessDatabases: Object.fromEntries(STORES.map((name, i) => [name, { url: servers[i]!.url() }])),
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: 3000, blockMs: 200, concurrency: 6, drainTimeoutMs: 3000 },
    alerts: { lagSlaMs: 60_000 },
  });
  env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env, 60_000);
  expect(migrated.code, migrated.stderr).toBe(0);
}, 120_000);

afterEach(async () => {
  await Promise.all(procs.map((p) => p.stop(5000).catch(() => {})));
  procs = [];
});

afterAll(async () => {
  const leaked = await killAll();
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
  await centerPool?.end().catch(() => {});
  await center?.drop();
  await stopAllServers();
  expect(leaked).toEqual([]);
}, 60_000);

const spawn = (
  name: string,
  role: 'coordinator' | 'worker',
  failpoints?: string,
  fleet: { config: string; env: Record<string, string | undefined> } = { config: configPath, env },
) => {
  const p = spawnCli(name, [role, '--config', fleet.config], { ...fleet.env, TC_FAILPOINTS: failpoints });
  procs.push(p);
  return p;
};

/** n orders with their timeouts, due in dueInMs, written the README's way: each order and its
 *  timeout in one transaction of the order's own database (one statement per store here). */
async function seed(n: number, dueInMs: number, up: (i: number) => boolean = () => true): Promise<[number, number]> {
  const from = nextOrder;
  const to = from + n - 1;
  nextOrder = to + 1;
  await Promise.all(
    STORES.map((_, i) =>
      !up(i)
        ? undefined
        : pools[i]!.query(
            `WITH o AS (INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::bigint, $2::bigint) g WHERE g % 3 = $3 RETURNING id)
         INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $4, id::text, now() + $5 * interval '1 millisecond' FROM o`,
            [from, to, i, KIND, dueInMs],
          ),
    ),
  );
  return [from, to];
}

/** The README's payment in the order's own database: cancel the timeout, then the guarded update. */
async function pay(id: number): Promise<{ cancelled: boolean; paid: boolean }> {
  const client = await pools[id % STORES.length]!.connect();
  try {
    await client.query('BEGIN');
    const c = await client.query(
      `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = $1 AND biz_id = $2 AND state = 'pending'`,
      [KIND, String(id)],
    );
    const p = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
    await client.query('COMMIT');
    return { cancelled: c.rowCount === 1, paid: p.rowCount === 1 };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** Drains every store and checks the invariants in each; returns them per store. */
async function expectInvariantsPerStore(timeoutMs = 60_000): Promise<Record<string, Invariants & { applied: number; failed: number }>> {
  const out: Record<string, Invariants & { applied: number; failed: number }> = {};
  for (const [i, store] of STORES.entries()) {
    // Every timeout seeded is due within seconds: wait until none is left pending or in flight
    // (waitForDrain alone counts only what is due now).
    await waitUntil(
      `${store}: every seeded timeout final`,
      async () => Number((await pools[i]!.query(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state IN ('pending', 'dispatched')`)).rows[0].n) === 0,
      timeoutMs,
    );
    const inv = await waitForDrain(pools[i]!, timeoutMs);
    const { rows } = await pools[i]!.query<{ applied: number; failed: number }>(
      `SELECT count(*) FILTER (WHERE state = 'done' AND result = 'applied')::int AS applied, count(*) FILTER (WHERE state = 'failed')::int AS failed
         FROM timeout_center.all_timeouts`,
    );
    out[store] = { ...inv, ...rows[0]! };
    expect({ store, ...inv }).toMatchObject({ store, lost: 0, doubled: 0, wrong: 0, reduceMismatch: 0, unreducedScans: 0 });
    expect(rows[0]!.failed, `${store}: nothing failed for good`).toBe(0);
    // Effects = applied timeouts: every close came from exactly one applied timeout.
    const { rows: closes } = await pools[i]!.query<{ n: number }>(`SELECT count(*)::int AS n FROM order_transitions WHERE to_status = 'closed'`);
    expect(closes[0]!.n, `${store}: closes = applied timeouts`).toBe(rows[0]!.applied);
  }
  // Nothing of this kind is in the center's database.
  const { rows } = await centerPool.query<{ n: number }>('SELECT count(*)::int AS n FROM timeout_center.all_timeouts');
  expect(rows[0]!.n).toBe(0);
  return out;
}

describe('timeouts stored beside the orders, three stores', () => {
  it('an insert into the wrong database is refused, naming the right one, and writes nothing', async () => {
    // Order 3 routes to orders_0 (3 % 3 = 0).
    await pools[1]!.query(`INSERT INTO orders (id, status) VALUES (3, 'unpaid') ON CONFLICT DO NOTHING`);
    await expect(pools[1]!.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '3', now())`, [KIND])).rejects.toThrow(
      /the timeout of order\.unpaid 3 belongs in store orders_0, not in store orders_1/,
    );
    await expect(centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '3', now())`, [KIND])).rejects.toThrow(
      /belongs in store orders_0, not in the center database/,
    );
    // One wrong row among right ones: the whole statement is refused.
    await expect(
      pools[0]!.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() + interval '1 hour' FROM unnest(ARRAY[3, 6, 7]) g`,
        [KIND],
      ),
    ).rejects.toThrow(/order\.unpaid 7 belongs in store orders_1, not in store orders_0/);
    await pools[1]!.query('DELETE FROM orders WHERE id = 3');
    for (const p of [...pools, centerPool]) expect((await p.query('SELECT count(*)::int AS n FROM timeout_center.timeouts')).rows[0].n).toBe(0);
    // README section 3's blocks, as written, in the order's own database, for an order outside the
    // later scenarios' ids (900000042 % 3 = 0: orders_0): the create, then the payment (its cancel
    // in the same store); the create in another store is refused.
    const ID = 900_000_042;
    await pools[0]!.query(forOrder(namedBlock('create').text, ID));
    expect((await pools[0]!.query(`SELECT state FROM timeout_center.timeouts WHERE biz_id = $1`, [String(ID)])).rows).toEqual([{ state: 'pending' }]);
    const elsewhere = await pools[1]!.connect();
    try {
      await expect(elsewhere.query(forOrder(namedBlock('create').text, ID + 3))).rejects.toThrow(
        /order\.unpaid 900000045 belongs in store orders_0, not in store orders_1/,
      );
      await elsewhere.query('ROLLBACK');
    } finally {
      elsewhere.release();
    }
    expect((await pools[1]!.query('SELECT count(*)::int AS n FROM orders WHERE id = $1', [ID + 3])).rows[0].n, 'the order went with its refused timeout').toBe(
      0,
    );
    await pools[0]!.query(forOrder(namedBlock('pay').text, ID));
    expect((await pools[0]!.query(`SELECT state FROM timeout_center.timeouts WHERE biz_id = $1`, [String(ID)])).rows).toEqual([{ state: 'cancelled' }]);
    expect((await pools[0]!.query(`SELECT status FROM orders WHERE id = $1`, [ID])).rows).toEqual([{ status: 'paid' }]);
    await pools[0]!.query(
      `DELETE FROM timeout_center.timeouts WHERE biz_id = '${ID}'; DELETE FROM orders WHERE id = ${ID}; DELETE FROM order_transitions WHERE order_id = ${ID}`,
    );
    // Where a timeout belongs, asked from SQL (any database of the fleet answers the same).
    const { rows } = await centerPool.query(`SELECT timeout_center.store_of($1, '3') AS s, timeout_center.store_of($1, '7') AS t`, [KIND]);
    expect(rows[0]).toEqual({ s: 'orders_0', t: 'orders_1' });
  });

  it('60,000 orders over three stores, payers at the due instant: each store closes its own, once, and no paid order', async () => {
    const coordinators = [spawn('coordinator-a', 'coordinator'), spawn('coordinator-b', 'coordinator')];
    const workers = [spawn('worker-1', 'worker'), spawn('worker-2', 'worker')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    await waitUntil(
      'every store and the center led',
      () => coordinators.flatMap((c) => c.lines.filter((l) => l.msg === 'became leader')).length >= STORES.length + 1,
      20_000,
    );
    const dueAt = Date.now() + 5000;
    const [from, to] = await seed(60_000, 5000);
    // 10 % of the orders pay at the due instant (the README's way), racing the closes.
    const payers = Array.from({ length: 6000 }, (_, i) => from + i * 10);
    await sleep(dueAt - 300 - Date.now());
    const results = await runLimited(payers, 16, (id) => pay(id));
    const inv = await expectInvariantsPerStore();
    const paid = results.filter((r) => r.paid).length;
    const { rows } = await Promise.all(pools.map((p) => p.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE status = 'closed'`))).then((r) => ({
      rows: r.map((x) => x.rows[0]!.n),
    }));
    const closed = rows.reduce((a, b) => a + b, 0);
    expect(closed + paid).toBe(to - from + 1);
    expect(paid, 'some payments won the race, some came too late').toBeGreaterThan(0);
    // Each store was led by one coordinator at a time, with its own epoch.
    const holders = await Promise.all(pools.map(async (p) => (await p.query('SELECT epoch, holder FROM timeout_center.coordinator_lease')).rows[0]));
    for (const h of holders) expect(Number(h.epoch)).toBeGreaterThanOrEqual(1);
    report('27 stores: 60,000 orders, payers at the due instant', { orders: to - from + 1, paid, closed, perStore: inv, holders });
  }, 180_000);

  it('the read verbs show a store with --store; an unknown store is refused, naming the stores', async () => {
    const scans = await cliOutput(['scans', '--store', 'orders_1', '--config', configPath, '--json']);
    expect(scans.code, scans.stderr).toBe(0);
    const list = JSON.parse(scans.stdout) as { scans: { scanId: number; state: string }[] } | { scanId: number }[];
    expect(JSON.stringify(list)).toMatch(/reduced/); // the scans of orders_1's own leader
    const failed = await cliOutput(['failed', '--store', 'orders_2', '--config', configPath]);
    expect(failed.code, failed.stderr).toBe(0);
    expect(failed.stdout).toMatch(/no failed timeouts/);
    const unknown = await cliOutput(['failed', '--store', 'orders_9', '--config', configPath]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/--store orders_9: not a store of .*; its stores: center, orders_0, orders_1, orders_2/);
    const noConfig = await cliOutput(['shards', '1', '--store', 'orders_0'], { TIMEOUT_CENTER_CONFIG: undefined });
    expect(noConfig.code).toBe(2);
    expect(noConfig.stderr).toMatch(/--store orders_0 needs the config/);
  });

  it('the coordinator leading the stores is SIGKILLed mid-drain: the other takes them over, nothing lost', async () => {
    const a = spawn('coordinator-a', 'coordinator');
    await a.waitForMsg('became leader', 20_000);
    await waitUntil('coordinator-a leads every store', () => a.lines.filter((l) => l.msg === 'became leader').length >= STORES.length + 1, 20_000);
    const b = spawn('coordinator-b', 'coordinator');
    await sleep(1000);
    const workers = [spawn('worker-1', 'worker'), spawn('worker-2', 'worker')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    const aId = `${hostname()}-${a.pid}`;
    await seed(30_000, 500);
    await waitUntil('the drain has started in every store', async () => {
      const n = await Promise.all(pools.map(async (p) => Number((await p.query(`SELECT count(*) AS n FROM timeout_center.done_timeouts`)).rows[0].n)));
      return n.every((x) => x > 0);
    });
    a.kill('SIGKILL');
    // A second wave falls due after the kill: only a new leader of each store plans it.
    await seed(15_000, 500);
    const inv = await expectInvariantsPerStore();
    const after = await Promise.all(pools.map(async (p) => (await p.query('SELECT epoch, holder FROM timeout_center.coordinator_lease')).rows[0]));
    after.forEach((h, i) => expect(h.holder, `${STORES[i]}: led by the survivor after the kill`).not.toBe(aId));
    expect(b.lines.filter((l) => l.msg === 'became leader').length).toBeGreaterThanOrEqual(STORES.length);
    report('27 stores: coordinator SIGKILL, stores taken over', { perStore: inv, after });
  }, 180_000);

  it('a coordinator started later takes its share of the stores, without restarting the first; nothing lost', async () => {
    const a = spawn('coordinator-a', 'coordinator');
    await waitUntil(
      'coordinator-a leads the center and every store',
      () => a.lines.filter((l) => l.msg === 'became leader').length >= STORES.length + 1,
      20_000,
    );
    const aId = `${hostname()}-${a.pid}`;
    const holders = async () => [
      (await centerPool.query('SELECT holder FROM timeout_center.coordinator_lease')).rows[0].holder as string,
      ...(await Promise.all(pools.map(async (p) => (await p.query('SELECT holder FROM timeout_center.coordinator_lease')).rows[0].holder as string))),
    ];
    const b = spawn('coordinator-b', 'coordinator');
    const bId = `${hostname()}-${b.pid}`;
    const workers = [spawn('worker-1', 'worker'), spawn('worker-2', 'worker')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    // A drain runs through the hand-over.
    await seed(9_000, 300);
    // Four leaderships (the center and three stores), two coordinators: a share of 2 each.
    const split = (h: string[]) => [h.filter((x) => x === aId).length, h.filter((x) => x === bId).length];
    await waitUntil('each coordinator leads its share, 2 of the 4', async () => JSON.stringify(split(await holders())) === '[2,2]', 30_000);
    const handed = a.lines.filter((l) => String(l.msg).startsWith('handing store')).map((l) => l['store']);
    expect(handed.length, 'coordinator-a handed stores over').toBeGreaterThanOrEqual(2);
    expect(handed, 'the center is never handed over by the balance').not.toContain('center');
    // Settled: the same split a few rounds later, and coordinator-a was never restarted.
    await sleep(4000);
    expect(split(await holders())).toEqual([2, 2]);
    expect(a.alive && b.alive).toBe(true);
    const inv = await expectInvariantsPerStore();
    report('27 stores: a second coordinator takes its share', { handed, holders: await holders(), perStore: inv });
  }, 180_000);

  it('a worker SIGKILLed mid-shard in each store: the shards run again elsewhere, each order changes once', async () => {
    const c = spawn('coordinator', 'coordinator');
    await c.waitForMsg('became leader', 20_000);
    await seed(9_000, 300);
    // Each killer worker dies at its first commit (in whichever store its first shard is), until
    // every store has lost a shard's worker; then a healthy worker drains.
    const killedIn = new Set<string>();
    for (let round = 0; round < 12 && killedIn.size < STORES.length; round++) {
      const w = spawn(`killer-${round}`, 'worker', 'worker.before-commit=1*kill');
      await w.exited;
      await sleep(3500); // the lease runs out: the reaper requeues the shard
      for (const [i, store] of STORES.entries()) {
        const { rows } = await pools[i]!.query(`SELECT count(*)::int AS n FROM timeout_center.shards WHERE attempts > 1 OR state = 'queued' AND attempts >= 1`);
        if (rows[0].n > 0) killedIn.add(store);
      }
    }
    expect([...killedIn].sort()).toEqual([...STORES]);
    spawn('worker-ok', 'worker');
    const inv = await expectInvariantsPerStore();
    report('27 stores: a worker SIGKILLed mid-shard in each store', { perStore: inv, killedIn: [...killedIn] });
  }, 240_000);

  it('flow control across stores: a pause in the center holds every store, and a rate limit is shared between them', async () => {
    const c = spawn('coordinator', 'coordinator');
    await waitUntil('every store led', () => c.lines.filter((l) => l.msg === 'became leader').length >= STORES.length + 1, 20_000);
    spawn('worker-1', 'worker');
    const paused = await runCli(['pause', KIND, '--actor', 'test'], env);
    expect(paused.code, paused.stderr).toBe(0);
    await sleep(1500); // within a second, each store's leader copies the pause
    const [from] = await seed(3000, 0);
    await sleep(3000);
    const applied = async () =>
      (
        await Promise.all(
          pools.map(async (p) =>
            Number((await p.query(`SELECT count(*) AS n FROM timeout_center.done_timeouts WHERE biz_id::bigint >= $1`, [from])).rows[0].n),
          ),
        )
      ).reduce((a, b) => a + b, 0);
    expect(await applied(), 'nothing of a paused kind starts, in any store').toBe(0);
    // 600/s for the kind: 200/s in each of its three stores. Resumed, 3,000 due take about 5 s.
    const limited = await runCli(['limit', KIND, '--rate', '600', '--actor', 'test'], env);
    expect(limited.code, limited.stderr).toBe(0);
    const shares = await Promise.all(
      pools.map(async (p) => (await p.query(`SELECT rate_limit::float8 AS r FROM timeout_center.kinds WHERE kind = $1`, [KIND])).rows[0]),
    );
    const resumed = await runCli(['resume', KIND, '--actor', 'test'], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    const t0 = Date.now();
    await sleep(2500);
    const inTwoAndAHalf = await applied();
    await waitUntil('the backlog drains under the limit', async () => (await applied()) === 3000, 30_000);
    const seconds = (Date.now() - t0) / 1000;
    report('27 stores: pause and a shared rate limit', {
      shares,
      appliedAfter2_5s: inTwoAndAHalf,
      drainSeconds: seconds,
      ratePerS: Math.round(3000 / seconds),
    });
    await waitUntil('every store holds its share', async () => {
      const r = await Promise.all(
        pools.map(async (p) => Number((await p.query(`SELECT rate_limit::float8 AS r FROM timeout_center.kinds WHERE kind = $1`, [KIND])).rows[0].r)),
      );
      return r.every((x) => x === 200);
    });
    expect(inTwoAndAHalf, 'the fleet stays under 600/s (plus one second of burst per store)').toBeLessThanOrEqual(600 * 2.5 + 3 * 200);
    expect(seconds, 'and drains at about the limit, not far below it').toBeLessThan(12);
    await runCli(['limit', KIND, '--reset', '--actor', 'test'], env);
    await expectInvariantsPerStore();
  }, 120_000);

  it("the center's database down: every store goes on closing its own timeouts", async () => {
    // A fleet whose center is a server of its own, so that it can be stopped; same three stores.
    const centerServer = await startPostgres();
    const config = writeConfig({ ...JSON.parse(readFileSync(configPath, 'utf8')), redisKeyPrefix: testKeyPrefix('stores-center') });
    const fleetEnv = { DATABASE_URL: centerServer.url(), REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
    const migrated = await runCli(['migrate', '--config', config], fleetEnv, 60_000);
    expect(migrated.code, migrated.stderr).toBe(0);
    const c = spawn('coordinator', 'coordinator', undefined, { config, env: fleetEnv });
    const w = spawn('worker', 'worker', undefined, { config, env: fleetEnv });
    await waitUntil('the center and every store led', () => c.lines.filter((l) => l.msg === 'became leader').length >= STORES.length + 1, 20_000);
    // The worker starts against the center (its checks), then opens each store's side.
    await waitUntil('the worker serves every store', () => w.lines.filter((l) => /^worker serves store/.test(String(l.msg))).length >= STORES.length, 20_000);
    await centerServer.pgCtl('-m', 'fast', 'stop');
    // Every store's leader notices at its next copy of the flow controls, and goes on.
    const tail = () =>
      `coordinator alive: ${String(c.alive)}; its last lines: ${JSON.stringify(c.lines.slice(-15).map((l) => [l.msg, l['store']]))}; its stderr: ${c.stderr.slice(-1500)}`;
    const [from] = await seed(3000, 300);
    await waitUntil(
      'the stores closed their new timeouts with the center down',
      async () => {
        const n = await Promise.all(
          pools.map(async (p) =>
            Number((await p.query(`SELECT count(*) AS n FROM timeout_center.done_timeouts WHERE biz_id::bigint >= $1`, [from])).rows[0].n),
          ),
        );
        return n.reduce((a, b) => a + b, 0) === 3000;
      },
      60_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; ${tail()}`);
    });
    // And they said why they go on without the center (at their next copy of the flow controls).
    await waitUntil(
      'a store leader kept its last flow controls',
      () => c.lines.some((l) => /keeps the flow controls it last copied/.test(String(l.msg))),
      20_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; ${tail()}`);
    });
    await expectInvariantsPerStore();
    expect(
      c.lines.some((l) => /flow controls/.test(String(l.msg))),
      'the store leaders said they keep the last controls',
    ).toBe(true);
  }, 120_000);

  it('one store stopped for 10 s mid-drain: the others go on, it resumes, nothing fails for good', async () => {
    const c = spawn('coordinator', 'coordinator');
    await c.waitForMsg('became leader', 20_000);
    const workers = [spawn('worker-1', 'worker'), spawn('worker-2', 'worker')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    // A steady stream: 300 orders due every 500 ms for 15 s.
    const due: [number, number][] = [];
    let stopped = false;
    const feeding = (async () => {
      for (let i = 0; i < 30; i++) {
        due.push(await seed(300, 200, (i) => i !== 2 || !stopped));
        await sleep(500);
      }
    })();
    await sleep(2000);
    const down = servers[2]!;
    // Its services cannot write there while it is down either: the feed skips it.
    stopped = true;
    await down.pgCtl('-m', 'fast', 'stop').catch(() => {});
    const stoppedAt = Date.now();
    const others = await Promise.all(
      [0, 1].map(async (i) => {
        // While orders_2 is down, the other stores keep closing what falls due.
        await sleep(8000);
        const { rows } = await pools[i]!.query<{ late: number }>(
          `SELECT count(*)::int AS late FROM timeout_center.timeouts WHERE state = 'pending' AND due_at < now() - interval '2 seconds'`,
        );
        return rows[0]!.late;
      }),
    );
    expect(others, 'the other stores kept up while orders_2 was down').toEqual([0, 0]);
    // status names the store that is down instead of failing, and shows the others.
    const status = await cliOutput(['status', '--config', configPath, '--json']);
    expect(status.code, status.stderr).toBe(1); // a problem named: exit 1
    const stores = (JSON.parse(status.stdout) as { stores: { store: string; reachable: boolean }[] }).stores;
    expect(stores.map((x) => [x.store, x.reachable])).toEqual([
      ['orders_0', true],
      ['orders_1', true],
      ['orders_2', false],
    ]);
    const text = await cliOutput(['status', '--config', configPath]);
    expect(text.code, text.stderr).toBe(1);
    expect(text.stdout).toMatch(/^Fleet: \d+ PROBLEMS? \(exit 1\)$/m);
    expect(text.stdout).toMatch(/^ {2}- store orders_2: UNREACHABLE \(.*\): its timeouts wait until it answers; the other databases go on/m);
    expect(text.stdout).toMatch(/^ {2}orders_2 +UNREACHABLE/m);
    await sleep(Math.max(0, 10_000 - (Date.now() - stoppedAt)));
    // An alert fires while it is unreachable (once for the fleet), naming it.
    const alerts = (type: string) => c.lines.filter((l) => l['alert'] === type && l['store'] === 'orders_2');
    expect(alerts('store_unreachable').length, 'store_unreachable alert while orders_2 is down').toBe(1);
    expect(String(alerts('store_unreachable')[0]!.msg)).toMatch(/ALERT store_unreachable: store orders_2 .* does not answer/);
    await down.pgCtl('-w', 'start');
    stopped = false;
    await feeding;
    await waitUntil('store_reachable alert once orders_2 answers', async () => alerts('store_reachable').length === 1, 20_000);
    const inv = await expectInvariantsPerStore(90_000);
    report('27 stores: orders_2 stopped 10 s mid-drain', { perStore: inv });
  }, 240_000);
});

/** The CLI's exit code and its stdout and stderr as printed (for the verbs operators read). */
function cliOutput(args: string[], extraEnv: Record<string, string | undefined> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, ...env, LOG_LEVEL: undefined, ...extraEnv }, timeout: 30_000 },
      (err, stdout, stderr) => {
        resolve({ code: err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1) : 0, stdout, stderr });
      },
    );
  });
}

/** Runs fn over items with at most `limit` at once. */
async function runLimited<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}
