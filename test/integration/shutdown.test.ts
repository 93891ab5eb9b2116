// Graceful shutdown with real processes. A worker that gets SIGTERM in the middle of a shard (held
// in its transaction by the failpoint worker.before-commit=sleep) finishes that shard, takes no
// new one, and exits 0; nothing is lost. A second SIGTERM forces the exit (code 1) and the shard
// goes to another worker once its lease runs out. A worker whose shard outlasts the drain bound
// still exits within the bound. A coordinator on SIGTERM releases its lock, so a standby takes over
// well before the lock's TTL.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const LOCK_TTL_MS = 9000;
const LEASE_MS = 4000;

describe('graceful shutdown (real processes)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let env: Record<string, string>;
  let coordinator: CliProcess;
  let nextOrder = 1;
  const prefix = testKeyPrefix('shutdown');
  const config = (drainTimeoutMs: number) =>
    writeConfig({
      redisKeyPrefix: prefix,
      kinds: { 'order.unpaid': { shardSize: 100, timeLimitMs: 3000, handler: { type: 'sql', sql: CLOSE_SQL } } },
      coordinator: { lockTtlMs: LOCK_TTL_MS, republishAfterMs: 2000 },
      worker: { concurrency: 1, leaseMs: LEASE_MS, drainTimeoutMs, blockMs: 200 },
    });

  beforeAll(async () => {
    db = await createTestDatabase('shutdown');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    const configPath = config(20_000);
    env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
    coordinator = spawnCli('coordinator', ['coordinator', '--port', '0'], env);
    await coordinator.waitForMsg('became leader', 20_000);
  });

  afterAll(() => tearDown({ pool, db }));

  /** n unpaid orders with timeouts due in dueInMs; returns their ids. */
  async function orders(n: number, dueInMs = 300): Promise<number[]> {
    const first = nextOrder;
    nextOrder += n;
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::int, $2::int) g`, [first, first + n - 1]);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, now() + $3 * interval '1 ms' FROM generate_series($1::int, $2::int) g`,
      [first, first + n - 1, dueInMs],
    );
    return Array.from({ length: n }, (_, i) => first + i);
  }

  async function states(ids: number[]): Promise<Record<string, number>> {
    const { rows } = await pool.query(`SELECT state, count(*)::int AS n FROM timeout_center.all_timeouts WHERE biz_id = ANY($1::text[]) GROUP BY state`, [
      ids.map(String),
    ]);
    return Object.fromEntries(rows.map((r) => [r.state, r.n]));
  }

  /** PostgreSQL's clock, to find the shards written after a point. */
  async function dbNow(): Promise<Date> {
    const { rows } = await pool.query<{ now: Date }>('SELECT clock_timestamp() AS now');
    return rows[0]!.now;
  }

  async function shardsSince(since: Date): Promise<{ state: string; owner: string | null; done_count: number | null }[]> {
    const { rows } = await pool.query(`SELECT state, owner, done_count FROM timeout_center.shards WHERE created_at >= $1 ORDER BY id`, [since]);
    return rows;
  }

  async function waitAllDone(ids: number[], timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await states(ids);
      if (s['done'] === ids.length) return;
      if (Date.now() > deadline) throw new Error(`not all done: ${JSON.stringify(s)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  const failpointHit = (p: CliProcess, name: string, timeoutMs = 20_000) =>
    new Promise<void>((resolve, reject) => {
      const deadline = Date.now() + timeoutMs;
      const check = () => {
        if (p.stderr.includes(`failpoint ${name} hit`)) resolve();
        else if (Date.now() > deadline) reject(new Error(`${p.name}: failpoint ${name} not hit; stderr: ${p.stderr}`));
        else setTimeout(check, 20);
      };
      check();
    });

  async function doubled(): Promise<number> {
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM (SELECT order_id FROM order_transitions GROUP BY 1 HAVING count(*) > 1) x`);
    return rows[0].n;
  }

  it('first SIGTERM mid-shard: the worker finishes the shard, takes no new one, exits 0; nothing lost', async () => {
    const worker = spawnCli('worker-drain', ['worker'], { ...env, TC_FAILPOINTS: 'worker.before-commit=1*sleep(3000)' });
    await worker.waitForMsg('worker started');
    const since = await dbNow();
    const ids = await orders(200); // two shards; concurrency 1
    await failpointHit(worker, 'worker.before-commit');
    const signalledAt = Date.now();
    worker.kill('SIGTERM');
    const exit = await worker.exited;
    const stopMs = Date.now() - signalledAt;
    expect(exit, worker.stderr).toEqual({ code: 0, signal: null });
    expect(worker.lines.some((l) => l.msg === 'stopped cleanly')).toBe(true);
    // It waited for the shard in its transaction (the failpoint sleeps 3 s from before the signal).
    expect(stopMs).toBeGreaterThan(1500);
    expect(stopMs).toBeLessThan(10_000);

    // Exactly one shard was done by it, committed; the other was not started.
    const shards = await shardsSince(since);
    expect(shards).toHaveLength(2);
    const mine = shards.filter((s) => s.owner !== null);
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({ state: 'done', done_count: 100 });
    expect(shards.find((s) => s.owner === null)).toMatchObject({ state: 'queued' });
    // The shard it never started claimed nothing: its timeouts are still plain pending rows.
    expect(await states(ids)).toEqual({ done: 100, pending: 100 });
    const { rows: w } = await pool.query(`SELECT stopped_at IS NOT NULL AS stopped FROM timeout_center.workers WHERE pid = $1`, [worker.pid]);
    expect(w[0].stopped).toBe(true);

    // The rest is safe in PostgreSQL/Redis: the next worker does it.
    const next = spawnCli('worker-next', ['worker'], env);
    await waitAllDone(ids);
    const { rows: closed } = await pool.query(`SELECT count(*)::int AS n FROM orders WHERE id = ANY($1) AND status = 'closed'`, [ids]);
    expect(closed[0].n).toBe(200);
    expect(await doubled()).toBe(0);
    expect((await next.stop()).code).toBe(0);
    console.log(`drain: SIGTERM mid-shard -> shard committed, exit 0 after ${stopMs} ms`);
  });

  it('a second SIGTERM forces the exit; the shard goes to another worker after its lease', async () => {
    const worker = spawnCli('worker-forced', ['worker'], { ...env, TC_FAILPOINTS: 'worker.before-commit=1*sleep(60000)' });
    await worker.waitForMsg('worker started');
    const ids = await orders(100);
    await failpointHit(worker, 'worker.before-commit');
    worker.kill('SIGTERM');
    await worker.waitForMsg(/^stopping: no new shards/);
    await new Promise((r) => setTimeout(r, 300));
    expect(worker.alive).toBe(true); // still draining
    const secondAt = Date.now();
    worker.kill('SIGTERM');
    const exit = await worker.exited;
    const forcedMs = Date.now() - secondAt;
    expect(exit.code).toBe(1);
    expect(forcedMs).toBeLessThan(2000);
    expect(worker.lines.some((l) => l.msg === 'second signal: exiting now without draining')).toBe(true);
    // Its transaction died with it: nothing applied, the claimed rows are pending again.
    expect(await states(ids)).toEqual({ pending: 100 });

    const takeover = spawnCli('worker-takeover', ['worker'], env);
    await waitAllDone(ids, LEASE_MS + 20_000);
    expect(await doubled()).toBe(0);
    expect((await takeover.stop()).code).toBe(0);
  });

  it('a shard that outlasts the drain bound: the worker still exits within the bound, the shard is not lost', async () => {
    const configPath = config(1000);
    const worker = spawnCli('worker-bounded', ['worker'], { ...env, TIMEOUT_CENTER_CONFIG: configPath, TC_FAILPOINTS: 'worker.before-commit=1*sleep(15000)' });
    await worker.waitForMsg('worker started');
    const since = await dbNow();
    const ids = await orders(100);
    await failpointHit(worker, 'worker.before-commit');
    const signalledAt = Date.now();
    worker.kill('SIGTERM');
    const exit = await worker.exited;
    const stopMs = Date.now() - signalledAt;
    expect(exit.code, worker.stderr).toBe(0);
    expect(stopMs).toBeLessThan(5000); // bound 1 s + closing connections, far below the 15 s shard
    expect(worker.lines.some((l) => /drain timeout/.test(String(l.msg)))).toBe(true);
    // Its transaction was rolled back (nothing applied) and the shard handed back at once, not
    // after its lease.
    const released = worker.lines.find((l) => l.msg === 'running shards released');
    expect(released?.['released']).toHaveLength(1);
    expect(await states(ids)).toEqual({ pending: 100 });
    const shards = await shardsSince(since);
    expect(shards).toHaveLength(1);
    expect(shards[0]).toMatchObject({ state: 'queued', owner: null });
    const takeover = spawnCli('worker-after-bound', ['worker'], env);
    const takeoverAt = Date.now();
    await waitAllDone(ids, LEASE_MS + 20_000);
    const doneMs = Date.now() - takeoverAt;
    expect(await doubled()).toBe(0);
    expect((await takeover.stop()).code).toBe(0);
    console.log(
      `drain bound: shard held 15 s, drainTimeoutMs 1000 -> rolled back, released, exit 0 after ${stopMs} ms; done by the next worker ${doneMs} ms after it started`,
    );
  });

  it('coordinator SIGTERM releases the lock: the standby leads well before the lock TTL', async () => {
    const standby = spawnCli('standby', ['coordinator', '--port', '0'], env);
    await standby.waitForMsg('serving /metrics, /healthz, /readyz');
    await new Promise((r) => setTimeout(r, 500));
    expect(standby.lines.some((l) => l.msg === 'became leader')).toBe(false);
    const { rows: before } = await pool.query(`SELECT epoch::int8 AS epoch, holder FROM timeout_center.coordinator_lease`);

    const signalledAt = Date.now();
    coordinator.kill('SIGTERM');
    const exit = await coordinator.exited;
    expect(exit.code, coordinator.stderr).toBe(0);
    const elected = await standby.waitForMsg('became leader', LOCK_TTL_MS + 5000);
    const takeoverMs = Date.now() - signalledAt;
    expect(Number(elected['epoch'])).toBeGreaterThan(Number(before[0].epoch));
    // Without the release the standby would wait for the TTL (9 s); it polls every TTL/3.
    expect(takeoverMs).toBeLessThan(LOCK_TTL_MS / 3 + 1500);
    const { rows: after } = await pool.query(`SELECT holder FROM timeout_center.coordinator_lease`);
    expect(after[0].holder).toContain(String(standby.pid));

    // The new leader works: a batch due now is applied.
    const worker = spawnCli('worker-after-failover', ['worker'], env);
    const ids = await orders(50);
    await waitAllDone(ids);
    expect((await worker.stop()).code).toBe(0);
    expect((await standby.stop()).code).toBe(0);
    console.log(`failover: coordinator SIGTERM -> standby leader after ${takeoverMs} ms (lock TTL ${LOCK_TTL_MS} ms)`);
  });

  it('shards read while the stop began are handed back at once, not after republishAfterMs or the lease', async () => {
    // Slow recovery on purpose: without the hand-back these shards would wait 60 s.
    const slow = {
      ...env,
      TIMEOUT_CENTER_CONFIG: writeConfig({
        redisKeyPrefix: prefix,
        kinds: { 'order.unpaid': { shardSize: 100, timeLimitMs: 3000, handler: { type: 'sql', sql: CLOSE_SQL } } },
        coordinator: { lockTtlMs: LOCK_TTL_MS, republishAfterMs: 60_000 },
        worker: { concurrency: 2, leaseMs: 60_000, blockMs: 5000 },
      }),
    };
    const leader = spawnCli('coordinator-slow-recovery', ['coordinator'], slow);
    await leader.waitForMsg('became leader', LOCK_TTL_MS + 5000);
    const worker = spawnCli('worker-reading', ['worker'], slow);
    await worker.waitForMsg('worker started');
    await new Promise((r) => setTimeout(r, 300)); // now inside its 5 s blocking read
    worker.kill('SIGTERM');
    const ids = await orders(100, 0); // claimed and published while that read still blocks
    const exit = await worker.exited;
    expect(exit.code, worker.stderr).toBe(0);
    const handed = worker.lines.find((l) => l.msg === 'handed back shards read but not started');
    expect(handed?.['shards'], JSON.stringify(worker.lines.slice(-5))).toHaveLength(1);
    expect(await states(ids)).toEqual({ pending: 100 });

    const next = spawnCli('worker-after-handback', ['worker'], slow);
    const startedAt = Date.now();
    await waitAllDone(ids, 20_000);
    const ms = Date.now() - startedAt;
    expect(ms).toBeLessThan(10_000);
    expect(await doubled()).toBe(0);
    expect((await next.stop()).code).toBe(0);
    expect((await leader.stop()).code).toBe(0);
    console.log(`hand-back: shard read during the stop was done ${ms} ms after the next worker started (republishAfterMs 60 s)`);
  });
});
