// The external path's history against the business database's truth, with real processes: a
// coordinator, workers stopped, killed, frozen (SIGSTOP) and drained at the worst moments, and
// payers at those moments (issue 24, points 1-3). The orders live in a business database that the
// center does not own. Two kinds close them there:
//   order.close  the README's guarded SQL close (`... AND status = 'unpaid'`);
//   order.count  a NON-idempotent code handler: `closes = closes + 1` on every call that reaches
//                the row (guarded only against paid orders), so any second effect shows as 2.
// Each scenario ends with: every due timeout final, every scan reduced, and history = truth per
// order (closed by us <=> its timeout done/applied; a cancelled timeout's order not closed by us;
// `closes` 1 for every closed order and 0 where paid).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { cancel } from '../../src/schedule.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix, type TestDatabase } from '../helpers/services.js';
import { procState, report, sleep, stopProcesses, waitUntil } from './harness.js';
import { quietPool } from '../helpers/quiet-pool.js';

const CLOSE = 'order.close';
const COUNT = 'order.count';
const LEASE_MS = 3000;

let center: TestDatabase;
let orders: TestDatabase;
let centerPool: pg.Pool;
let ordersPool: pg.Pool;
let configPath: string;
/** The same config with a drain bound shorter than the slow handler (scenario E). */
let shortDrainConfigPath: string;
let env: Record<string, string | undefined>;
let coordinator: CliProcess;
const workers: CliProcess[] = [];

function worker(name: string, opts: { failpoints?: string; env?: Record<string, string>; config?: string } = {}): CliProcess {
  const p = spawnCli(name, ['worker', '--config', opts.config ?? configPath, '--concurrency', '1'], { ...env, TC_FAILPOINTS: opts.failpoints, ...opts.env });
  workers.push(p);
  return p;
}

async function seed(kind: string, from: number, to: number, paidEvery = 0): Promise<void> {
  await ordersPool.query(
    `INSERT INTO orders (id, status) SELECT g, CASE WHEN $3::int > 0 AND g % $3::int = 0 THEN 'paid' ELSE 'unpaid' END FROM generate_series($1::bigint, $2::bigint) g`,
    [from, to, paidEvery],
  );
  await centerPool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() FROM generate_series($2::bigint, $3::bigint) g`,
    [kind, from, to],
  );
}

async function drained(from: number, to: number, timeoutMs = 45_000): Promise<void> {
  const open = () =>
    centerPool.query<{ n: number; scans: number }>(
      `SELECT (SELECT count(*) FROM timeout_center.timeouts WHERE biz_id::bigint BETWEEN $1 AND $2 AND state NOT IN ('done', 'cancelled', 'failed'))::int AS n,
              (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int AS scans`,
      [from, to],
    );
  await waitUntil(
    `timeouts ${from}-${to} final and scans reduced`,
    async () => {
      const { rows } = await open();
      return rows[0]!.n === 0 && rows[0]!.scans === 0;
    },
    timeoutMs,
    100,
  ).catch(async (err: unknown) => {
    const { rows: t } = await centerPool.query(
      `SELECT biz_id, state, shard_id, attempts, last_error FROM timeout_center.timeouts WHERE biz_id::bigint BETWEEN $1 AND $2 AND state NOT IN ('done', 'cancelled', 'failed') LIMIT 5`,
      [from, to],
    );
    const { rows: sh } = await centerPool.query(`SELECT id, state, attempts, error_sample FROM timeout_center.shards WHERE state IN ('queued', 'running')`);
    throw new Error(`${(err as Error).message}\ntimeouts: ${JSON.stringify(t)}\nopen shards: ${JSON.stringify(sh)}`);
  });
}

/** Per order of [from, to]: the center's history and the business database's truth. */
async function truth(
  from: number,
  to: number,
): Promise<Map<number, { state: string; result: string | null; status: string; closes: number; transitions: number }>> {
  const { rows: history } = await centerPool.query<{ biz_id: string; state: string; result: string | null }>(
    `SELECT biz_id, state, result FROM timeout_center.all_timeouts WHERE biz_id::bigint BETWEEN $1 AND $2`,
    [from, to],
  );
  const { rows: business } = await ordersPool.query<{ id: string; status: string; closes: number; transitions: number }>(
    `SELECT o.id::text, o.status, o.closes, (SELECT count(*) FROM order_transitions t WHERE t.order_id = o.id)::int AS transitions
       FROM orders o WHERE o.id BETWEEN $1 AND $2`,
    [from, to],
  );
  const byId = new Map(history.map((h) => [Number(h.biz_id), h]));
  return new Map(
    business.map((b) => {
      const h = byId.get(Number(b.id));
      return [Number(b.id), { state: h?.state ?? 'none', result: h?.result ?? null, status: b.status, closes: b.closes, transitions: b.transitions }];
    }),
  );
}

/** History = business truth for every order of [from, to], and no second effect anywhere. */
async function expectHistoryIsTruth(from: number, to: number, closesCounted: boolean): Promise<Record<string, number>> {
  const orders = await truth(from, to);
  const wrong: string[] = [];
  const tally: Record<string, number> = {};
  for (const [id, o] of orders) {
    const key = `${o.state}/${o.result ?? '-'}/${o.status}`;
    tally[key] = (tally[key] ?? 0) + 1;
    const closedByUs = o.status === 'closed';
    if (closedByUs !== (o.state === 'done' && o.result === 'applied')) wrong.push(`${id}: order ${o.status}, timeout ${o.state}/${o.result ?? '-'}`);
    if (o.transitions > 1) wrong.push(`${id}: ${o.transitions} status transitions`);
    if (closesCounted && o.closes !== (closedByUs ? 1 : 0)) wrong.push(`${id}: closes = ${o.closes} (order ${o.status})`);
  }
  expect(wrong, `history = business truth for orders ${from}-${to}`).toEqual([]);
  return tally;
}

async function failpointHit(p: CliProcess, name: string, timeoutMs = 20_000): Promise<void> {
  await waitUntil(`${p.name} to hit failpoint ${name}`, () => p.stderr.includes(`failpoint ${name} hit`), timeoutMs, 20);
}

/** The README's payment, for an order in the business database: cancel the timeout first (in the
 *  center), then the guarded UPDATE, whose row count decides. */
async function pay(kind: string, id: number): Promise<{ cancelled: boolean; paid: boolean }> {
  const cancelled = await cancel(centerPool, kind, id);
  const { rowCount } = await ordersPool.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
  return { cancelled, paid: rowCount === 1 };
}

beforeAll(async () => {
  center = await createTestDatabase('ext-rerun-center');
  orders = await createTestDatabase('ext-rerun-orders');
  centerPool = quietPool(center.url);
  ordersPool = quietPool(orders.url);
  await createOrdersSchema(ordersPool);
  await ordersPool.query('ALTER TABLE orders ADD COLUMN closes int NOT NULL DEFAULT 0');

  const dir = mkdtempSync(join(tmpdir(), 'tc-count-'));
  // Not idempotent on purpose. TC_TEST_SLEEP_MS: the first call sleeps (scenario E);
  // TC_TEST_BATCH_FAIL_ONCE: the first call fails as a whole batch (connection reset).
  writeFileSync(
    join(dir, 'count.mjs'),
    `let calls = 0;
export default async function count(items, ctx) {
  calls += 1;
  if (calls === 1 && process.env.TC_TEST_SLEEP_MS) await new Promise((r) => setTimeout(r, Number(process.env.TC_TEST_SLEEP_MS)));
  if (calls === 1 && process.env.TC_TEST_BATCH_FAIL_ONCE) throw Object.assign(new Error('target reset the connection'), { code: 'ECONNRESET' });
  const { rows } = await ctx.client.query(
    "UPDATE orders SET closes = closes + 1, status = 'closed' WHERE id = ANY($1::bigint[]) AND status <> 'paid' RETURNING id::text",
    [items.map((i) => i.bizId)],
  );
  return rows.map((r) => r.id);
}
`,
  );
  const config: ConfigInput = {
    redisKeyPrefix: testKeyPrefix('ext-rerun'),
    poolSize: 3,
    businessDatabases: { orders: { url: orders.url, poolSize: 3 } },
    breaker: { consecutiveFailures: 5, halfOpenAfterMs: 500, maxRetryDelayMs: 1000 },
    kinds: {
      [CLOSE]: { shardSize: 100, maxAttempts: 5, backoffMs: 200, timeLimitMs: 2500, handler: { type: 'sql', sql: CLOSE_SQL, database: 'orders' } },
      [COUNT]: {
        shardSize: 100,
        maxAttempts: 5,
        backoffMs: 200,
        timeLimitMs: 2500,
        handler: { type: 'code', module: join(dir, 'count.mjs'), database: 'orders' },
      },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 1000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: LEASE_MS, blockMs: 200, concurrency: 1, drainTimeoutMs: 3000 },
    alerts: { lagSlaMs: 600_000 },
  };
  configPath = writeConfig(config);
  shortDrainConfigPath = writeConfig({ ...config, worker: { ...config.worker, drainTimeoutMs: 300 } });
  env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env);
  if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
  coordinator = spawnCli('coordinator', ['coordinator', '--config', configPath], env);
  await coordinator.waitForMsg(/leader|elected/i, 30_000);
}, 120_000);

// A scenario's workers never outlive it (a failed one would take the next scenario's shards).
afterEach(() => stopProcesses(workers));

afterAll(async () => {
  await stopProcesses(workers);
  await killAll();
  for (const p of [centerPool, ordersPool]) await p?.end().catch(() => {});
  await center?.drop().catch(() => {});
  await orders?.drop().catch(() => {});
});

describe('the external path: history = the business database, whatever stops when', () => {
  it('A. a cancel between the business commit and the record changes nothing and says so; the order stays closed, its timeout applied', async () => {
    await seed(CLOSE, 1001, 1001);
    const w1 = worker('worker-a1', { failpoints: 'external.before-record=1*sleep(3000)' });
    await failpointHit(w1, 'external.before-record');
    const payment = await pay(CLOSE, 1001);
    expect(payment, 'the close committed first: the cancel is too late and the guarded payment refused').toEqual({ cancelled: false, paid: false });
    await drained(1001, 1001);
    const tally = await expectHistoryIsTruth(1001, 1001, false);
    expect(tally).toEqual({ 'done/applied/closed': 1 });
  });

  it("A0. a payer's cancel while the shard's run is in the business database is answered at once (refused), without waiting for the run", async () => {
    // The bound (sql/0020, docs/reliability.md): a cancel waits at most for the claim's
    // transaction in the center (two statements, no call elsewhere), never for the business call:
    // the timeout stays pending, unwritten, while its shard runs, and the cancel is refused then.
    await seed(CLOSE, 1501, 1501);
    const w1 = worker('worker-a0', { failpoints: 'external.after-apply=1*sleep(2000)' });
    await failpointHit(w1, 'external.after-apply');
    const cancelled = await cancel(centerPool, CLOSE, 1501);
    const { rows } = await ordersPool.query<{ status: string }>('SELECT status FROM orders WHERE id = 1501');
    expect(cancelled, 'the shard holds the timeout: too late').toBe(false);
    expect(rows[0]!.status, 'answered before the run committed in the business database: the cancel did not wait for it').toBe('unpaid');
    await drained(1501, 1501);
    const tally = await expectHistoryIsTruth(1501, 1501, false);
    expect(tally).toEqual({ 'done/applied/closed': 1 });
  });

  it('A2. the same cancel after a batch failure: refused, the payer pays, the retry skips the paid order', async () => {
    await seed(COUNT, 2001, 2001);
    const w1 = worker('worker-a2', { failpoints: 'external.before-record=1*sleep(3000)', env: { TC_TEST_BATCH_FAIL_ONCE: '1' } });
    await failpointHit(w1, 'external.before-record');
    const payment = await pay(COUNT, 2001);
    expect(payment, 'a worker holds the timeout: the cancel is too late, the guarded payment decides (the batch rolled back)').toEqual({
      cancelled: false,
      paid: true,
    });
    await drained(2001, 2001);
    const tally = await expectHistoryIsTruth(2001, 2001, true);
    expect(tally).toEqual({ 'done/skipped/paid': 1 });
  });

  it('B. a re-run never records a row it did not run: killed after the business commit, payment, a new order due, lease expiry: the new order closes once', async () => {
    await seed(CLOSE, 3001, 3001);
    const w1 = worker('worker-b1', { failpoints: 'external.after-apply-commit=1*kill' });
    expect((await w1.exited).signal).toBe('SIGKILL');
    const payment = await pay(CLOSE, 3001);
    expect(payment.paid, 'order 3001 was closed by the killed run').toBe(false);
    await seed(CLOSE, 3002, 3002);
    worker('worker-b2');
    await drained(3001, 3002);
    const tally = await expectHistoryIsTruth(3001, 3002, false);
    expect(tally).toEqual({ 'done/applied/closed': 2 });
  });

  const frozenAt = [
    ['claim', 'external.after-claim'],
    ['apply', 'external.after-apply'],
    ['commit', 'external.before-business-commit'],
  ] as const;
  frozenAt.forEach(([where, point], i) => {
    it(`C${i + 1}. a worker frozen (SIGSTOP) past its lease at ${where}, then resumed: no order changes twice`, async () => {
      const from = 10_001 + i * 1000;
      const to = from + 49;
      await seed(COUNT, from, to, 10);
      const w1 = worker(`worker-frozen-${where}`, { failpoints: `${point}=1*pause` });
      await waitUntil(`${w1.name} stopped at ${point}`, () => procState(w1.pid) === 'T', 20_000, 20);
      const frozenAtMs = Date.now();
      const rescue = worker(`worker-rescue-${where}`);
      // Let the frozen worker go on once its lease is gone and the rescue has either run the rows,
      // given up on them as a batch (it met the frozen run's locks past its time limit) or chosen to
      // wait, and while the frozen run's transaction is still open (sessions idle in a transaction
      // for 10 s are ended): whatever the frozen run does then must not apply a second time, and the
      // rescue must not have applied while it might.
      await waitUntil(
        'the rescue to run, give up on or wait for the rows',
        async () =>
          rescue.lines.some((l) => /external batch failed as a whole|external shard waits/.test(String(l.msg))) ||
          (await centerPool.query(`SELECT 1 FROM timeout_center.timeouts WHERE biz_id::bigint BETWEEN $1 AND $2 LIMIT 1`, [from, to])).rowCount === 0,
        8000,
        50,
      ).catch(() => {});
      await sleep(Math.max(0, LEASE_MS + 500 - (Date.now() - frozenAtMs)));
      process.kill(w1.pid, 'SIGCONT');
      await drained(from, to, 60_000);
      await sleep(1500); // the resumed worker's late statements
      const tally = await expectHistoryIsTruth(from, to, true);
      expect(tally).toEqual({ 'done/applied/closed': 45, 'done/skipped/paid': 5 });
      report(`external re-run, frozen at ${where}`, { tally });
    }, 120_000);
  });

  it('D. SIGTERM with a drain bound shorter than the handler: the released shard runs elsewhere, no order changes twice', async () => {
    const from = 20_001;
    const to = 20_050;
    await seed(COUNT, from, to, 10);
    const w1 = worker('worker-draining', { config: shortDrainConfigPath, failpoints: 'external.after-claim=1*sleep(1)', env: { TC_TEST_SLEEP_MS: '1500' } });
    await failpointHit(w1, 'external.after-claim');
    await sleep(300); // inside the handler's sleep
    w1.child.kill('SIGTERM');
    worker('worker-after-drain');
    await drained(from, to, 60_000);
    await w1.exited;
    await sleep(1500);
    const tally = await expectHistoryIsTruth(from, to, true);
    expect(tally).toEqual({ 'done/applied/closed': 45, 'done/skipped/paid': 5 });
  });
});
