// Two-phase runs of the external path (issue 32), with real processes. The center's server allows
// prepared transactions (max_prepared_transactions = 16, a private PostgreSQL for this file, with
// both the center's database and the business database "orders" on it), so a shard's first run
// whose handler runs in a business database claims and records its timeouts in one center
// transaction, PREPAREd before the business COMMIT and committed after it; a run left prepared is
// finished by the resolver of a live worker, by its marker in the business database. Two handlers:
//   guarded  the README's close (`... AND status = 'unpaid'`), also counting `closes = closes + 1`;
//   counting NOT idempotent: `closes = closes + 1` on every call that reaches the row (guarded only
//            against paid orders), so any second effect shows as closes = 2.
// Each scenario has a kind and a biz id range of its own:
//   A. happy path: 3,000 orders (every 10th paid), guarded handler: the worker says it runs in two
//      phases, every shard with rows PREPAREs (failpoint hits), paid orders' timeouts skipped;
//   B. a worker SIGKILLed at external.after-prepare: its prepared transaction is left (seen in
//      pg_prepared_xacts), another worker's resolver rolls it back, the shard runs again after its
//      lease (commit first), every unpaid order closed exactly once;
//   C. a worker SIGKILLed at external.after-apply-commit (business committed, center prepared): the
//      resolver commits it; the shard is not run again; no order closed twice;
//   D. a payer's cancel while a two-phase run holds the timeout (handler done, the run slowed before
//      its marker's outcome): the cancel waits for the run, then answers UPDATE 0; the order is
//      closed, its timeout done/applied;
//   E. a worker frozen (SIGSTOP) right after its PREPARE: the prepared transaction stays until the
//      server ends the frozen run's business session (time limit + 5 s idle), then another worker's
//      resolver rolls it back and the shard runs again; the frozen worker resumed afterwards
//      changes nothing;
//   F. the unsafe payment order (README section 3: "cancel first, or not at all") against a two-phase
//      run: a payer pays an order (holding its row lock in the business database), then cancels its
//      timeout, which the run holds locked in the center while its handler waits on the order. No
//      server sees the cross-database wait; the handler's lock wait runs out (its lock_timeout,
//      100 ms, long before its time limit), the run backs out, the cancel goes through and the shard
//      runs again at once, commit first: the paid order is never closed, every other order closed
//      once, the payer done well within the time limit + 5 s;
//   G. a row that kills its worker on the two-phase path (a code handler in the business database
//      that SIGKILLs its process when its batch holds order K; three workers, each restarted when it
//      dies; 200 orders due at once, 200 more coming due meanwhile): the first death leaves nothing
//      (the two-phase claim rolls back), the kind's re-runs commit first, which count attempts and
//      split the rows until K is alone; no row is left dispatched under a shard that has ended (a
//      split half runs its own rows), K's timeout ends failed (abandoned), every other unpaid order
//      closed once, the deaths bounded.
//   H. a handler that fails as a batch (the business database answers 53300 while a switch there is
//      on): a two-phase run whose handler failed hands the failure to the commit-first run, which
//      records the retry without calling the handler again. Counted by a sequence the handler's
//      statement advances once per call (a sequence is not rolled back): one call per shard run,
//      not two (before: the handler ran twice, the breaker counted two failures and a slow
//      handler's time limit was paid twice). A lock conflict (F) still runs again at once: there
//      the commit-first run is the remedy.
// Each scenario ends with: nothing left in pg_prepared_xacts, no marker left in the business
// database, every timeout final, and history = truth per order (closed by us <=> its timeout
// done/applied; closes 1 for every closed order and 0 where paid; at most one status transition).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { startPostgres, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { TEST_REDIS_URL, testKeyPrefix } from '../helpers/services.js';
import { linesMatching, procState, report, sleep, stopProcesses, waitUntil } from './harness.js';
import { quietPool } from '../helpers/quiet-pool.js';

const LEASE_MS = 3000;
const TIME_LIMIT_MS = 2500;
/** The idle bound of a two-phase run's sessions past its kind's time limit (external-executor.ts). */
const TWO_PHASE_IDLE_MS = 5000;

/** The README's guarded close, counting its effects. */
const GUARDED_SQL = CLOSE_SQL.replace("status = 'closed',", "status = 'closed', closes = closes + 1,");
/** Not idempotent: every call that reaches an order that is not paid counts. */
const COUNTING_SQL = "UPDATE orders SET status = 'closed', closed_at = now(), closes = closes + 1 WHERE id = ANY($1) AND status <> 'paid' RETURNING id";

const KIND = {
  a: 'twophase.a',
  b: 'twophase.b',
  c: 'twophase.c',
  d: 'twophase.d',
  e: 'twophase.e',
  f: 'twophase.f',
  g: 'twophase.g',
  h: 'twophase.h',
} as const;

/** H's close: the guarded close behind a gate evaluated once per call (an uncorrelated subquery),
 *  which counts the call and fails it as a batch while h_switch is on. */
const GATED_SQL = GUARDED_SQL.replace("AND status = 'unpaid'", "AND status = 'unpaid' AND (SELECT h_gate())");

/** F's kind: a small time limit, so that a wait nobody detects would end quickly. */
const F_TIME_LIMIT_MS = 2000;
/** G's order that kills every worker whose batch holds it. */
const G_KILLER = 60_113;
/** G's kind's attempts: 2, as poison.test.ts 7b on the commit-first path. A two-phase first run
 *  that dies leaves nothing, and the shard's first committed claim counts as its attempt 1
 *  (external_claim.sql): its re-run claims afresh, and the run after it splits. Before that, a
 *  two-phase death used up an attempt and with 2 the reaper abandoned the killer's shard with all
 *  its mates (seen: a 20-row shard, 20 timeouts failed, 17 of them of innocent unpaid orders). */
const G_MAX_ATTEMPTS = 2;
const G_SHARD_SIZE = 10;

/** G's code handler (a module of its own, loaded by every CLI worker): the README's guarded close,
 *  counting its effects, on the business transaction it is given; a batch holding G_KILLER kills
 *  its process outright (SIGKILL: nothing runs after it), after a line on stderr naming its run. */
const KILLER_MODULE = `import { writeSync } from 'node:fs';
export default async function close(items, ctx) {
  if (items.some((i) => i.bizId === '${G_KILLER}')) {
    writeSync(2, 'killer: shard ' + ctx.shardId + ' attempt ' + ctx.attempt + ' items ' + items.length + '\\n');
    process.kill(process.pid, 'SIGKILL');
    await new Promise(() => {});
  }
  const { rows } = await ctx.client.query(${JSON.stringify(GUARDED_SQL)}, [items.map((i) => i.bizId)]);
  return rows.map((r) => String(r.id));
}
`;

let server: PostgresServer;
let centerPool: pg.Pool;
let ordersPool: pg.Pool;
let centerUrl: string;
let configPath: string;
let env: Record<string, string | undefined>;
let coordinator: CliProcess;
const workers: CliProcess[] = [];

function worker(name: string, opts: { failpoints?: string; concurrency?: number } = {}): CliProcess {
  const p = spawnCli(name, ['worker', '--config', configPath, '--concurrency', String(opts.concurrency ?? 1)], {
    ...env,
    TC_FAILPOINTS: opts.failpoints,
  });
  workers.push(p);
  return p;
}

/** Orders from-to (every paidEvery-th paid) and their timeouts, due now, or one every spreadMs from now. */
async function seed(kind: string, from: number, to: number, paidEvery = 0, spreadMs = 0): Promise<void> {
  await ordersPool.query(
    `INSERT INTO orders (id, status) SELECT g, CASE WHEN $3::int > 0 AND g % $3::int = 0 THEN 'paid' ELSE 'unpaid' END FROM generate_series($1::bigint, $2::bigint) g`,
    [from, to, paidEvery],
  );
  await centerPool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $1, g::text, now() + (g - $2::bigint) * $4::int * interval '1 millisecond' FROM generate_series($2::bigint, $3::bigint) g`,
    [kind, from, to, spreadMs],
  );
}

async function count(pool: pg.Pool, text: string, params: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(text, params);
  return Number(rows[0]?.n ?? 0);
}

/** The center's prepared transactions (global ids). */
async function prepared(): Promise<string[]> {
  const { rows } = await centerPool.query<{ gid: string }>(`SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY prepared`);
  return rows.map((r) => r.gid);
}

/** The shard id a global id tc-x:<shard>:<lease token>:<database> names. */
function shardOf(gid: string): number {
  const m = /^tc-x:(\d+):[0-9a-f-]{36}:orders$/.exec(gid);
  if (!m) throw new Error(`not a two-phase run's global id: ${gid}`);
  return Number(m[1]);
}

async function drained(kind: string, from: number, to: number, timeoutMs = 45_000): Promise<void> {
  await waitUntil(
    `timeouts of ${kind} ${from}-${to} final and scans reduced`,
    async () =>
      (await count(
        centerPool,
        `SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id::bigint BETWEEN $2 AND $3 AND state NOT IN ('done', 'cancelled', 'failed')`,
        [kind, from, to],
      )) === 0 && (await count(centerPool, `SELECT count(*)::int AS n FROM timeout_center.scans WHERE state <> 'reduced'`)) === 0,
    timeoutMs,
    100,
  ).catch(async (err: unknown) => {
    const { rows: t } = await centerPool.query(
      `SELECT state, count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id::bigint BETWEEN $2 AND $3 GROUP BY 1`,
      [kind, from, to],
    );
    const { rows: sh } = await centerPool.query(
      `SELECT id, state, attempts, error_sample FROM timeout_center.shards WHERE kind = $1 AND state IN ('queued', 'running')`,
      [kind],
    );
    const logs = workers.flatMap((p) =>
      p.lines
        .filter((l) => (l.level ?? 0) >= 40)
        .slice(-6)
        .map((l) => `${p.name}: ${JSON.stringify(l).slice(0, 400)}`),
    );
    throw new Error(
      `${(err as Error).message}\ntimeouts: ${JSON.stringify(t)}\nopen shards: ${JSON.stringify(sh)}\nprepared: ${JSON.stringify(await prepared())}\n${logs.join('\n')}`,
    );
  });
}

/** Timeouts of kind in [from, to] not final yet. */
async function unfinished(kind: string, from: number, to: number): Promise<number> {
  return count(
    centerPool,
    `SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id::bigint BETWEEN $2 AND $3 AND state NOT IN ('done', 'cancelled', 'failed')`,
    [kind, from, to],
  );
}

/** A shard that has ended with timeouts still dispatched under it: what it left, what it ran. */
interface Stranded {
  shard: string;
  state: string;
  attempts: number;
  stuck: string;
  ran: string | null;
  /** The shard whose split made it (split_pinned.sql), if one did. */
  splitFrom: string | null;
}

/** Timeouts left dispatched under a shard that is no longer queued or running (nothing runs them). */
async function strandedRows(kind: string): Promise<Stranded[]> {
  const { rows } = await centerPool.query<Stranded>(
    `SELECT s.id::text AS shard, s.state::text AS state, s.attempts, string_agg(t.biz_id, ',' ORDER BY t.biz_id) AS stuck,
            (SELECT string_agg(d.biz_id, ',' ORDER BY d.biz_id) FROM timeout_center.done_timeouts d WHERE d.shard_id = s.id) AS ran,
            (SELECT p.id::text FROM timeout_center.shards p
              WHERE p.kind = s.kind AND p.error_sample ~ ('^split into shards (.*, )?' || s.id || '(,| after)')) AS "splitFrom"
       FROM timeout_center.timeouts t JOIN timeout_center.shards s ON s.id = t.shard_id
      WHERE t.kind = $1 AND t.state = 'dispatched' AND s.state NOT IN ('queued', 'running')
      GROUP BY s.id`,
    [kind],
  );
  return rows;
}

/** History = business truth for every order of [from, to], and no second effect anywhere. */
async function expectHistoryIsTruth(kind: string, from: number, to: number): Promise<Record<string, number>> {
  const { rows: history } = await centerPool.query<{ biz_id: string; state: string; result: string | null; n: number }>(
    `SELECT biz_id, min(state::text) AS state, min(result::text) AS result, count(*)::int AS n
       FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id::bigint BETWEEN $2 AND $3 GROUP BY biz_id`,
    [kind, from, to],
  );
  const { rows: business } = await ordersPool.query<{ id: string; status: string; closes: number; transitions: number }>(
    `SELECT o.id::text, o.status, o.closes, (SELECT count(*) FROM order_transitions t WHERE t.order_id = o.id)::int AS transitions
       FROM orders o WHERE o.id BETWEEN $1 AND $2`,
    [from, to],
  );
  const byId = new Map(history.map((h) => [Number(h.biz_id), h]));
  const wrong: string[] = [];
  const tally: Record<string, number> = {};
  for (const b of business) {
    const h = byId.get(Number(b.id));
    const key = `${h?.state ?? 'none'}/${h?.result ?? '-'}/${b.status}`;
    tally[key] = (tally[key] ?? 0) + 1;
    const closedByUs = b.status === 'closed';
    if (h && h.n !== 1) wrong.push(`${b.id}: ${h.n} timeouts in the history`);
    if (closedByUs !== (h?.state === 'done' && h.result === 'applied'))
      wrong.push(`${b.id}: order ${b.status}, timeout ${h?.state ?? 'none'}/${h?.result ?? '-'}`);
    if (b.transitions > 1) wrong.push(`${b.id}: ${b.transitions} status transitions`);
    if (b.closes !== (closedByUs ? 1 : 0)) wrong.push(`${b.id}: closes = ${b.closes} (order ${b.status})`);
  }
  expect(wrong.slice(0, 20), `history = business truth for orders ${from}-${to} (${wrong.length} wrong)`).toEqual([]);
  return tally;
}

/** Nothing left prepared in the center, no marker left in the business database. */
async function expectNothingLeft(): Promise<void> {
  expect(await prepared(), 'no two-phase run left prepared').toEqual([]);
  // A run deletes its marker right after its COMMIT PREPARED: give that statement a moment.
  await waitUntil(
    'no marker left in the business database',
    async () => (await count(ordersPool, 'SELECT count(*)::int AS n FROM timeout_center.markers')) === 0,
    5000,
  ).catch(() => {});
  const { rows } = await ordersPool.query<{ shard_id: string; lease_token: string }>('SELECT shard_id::text, lease_token::text FROM timeout_center.markers');
  expect(rows, 'no marker left in the business database').toEqual([]);
}

async function failpointHit(p: CliProcess, name: string, timeoutMs = 20_000): Promise<void> {
  await waitUntil(`${p.name} to hit failpoint ${name}`, () => p.stderr.includes(`failpoint ${name} hit`), timeoutMs, 10);
}

function hits(p: CliProcess, name: string): number {
  return p.stderr.split('\n').filter((l) => l.startsWith(`failpoint ${name} hit`)).length;
}

async function shard(id: number): Promise<{ state: string; attempts: number; done: number; skipped: number; claimedAtMs: number | null }> {
  const { rows } = await centerPool.query<{ state: string; attempts: number; done: number; skipped: number; claimedAtMs: number | null }>(
    `SELECT state, attempts, done_count AS done, skipped_count AS skipped, (extract(epoch FROM claimed_at) * 1000)::float8 AS "claimedAtMs"
       FROM timeout_center.shards WHERE id = $1`,
    [id],
  );
  return rows[0]!;
}

beforeAll(async () => {
  server = await startPostgres({ settings: { max_prepared_transactions: '16' } });
  const admin = quietPool(server.url());
  await admin.query('CREATE DATABASE tp_center');
  await admin.query('CREATE DATABASE orders');
  await admin.end();
  centerUrl = server.url('tp_center');
  centerPool = quietPool(centerUrl);
  ordersPool = quietPool(server.url('orders'));
  await createOrdersSchema(ordersPool);
  await ordersPool.query('ALTER TABLE orders ADD COLUMN closes int NOT NULL DEFAULT 0');
  await ordersPool.query(`
    CREATE SEQUENCE h_calls;
    CREATE TABLE h_switch (failing boolean NOT NULL);
    INSERT INTO h_switch VALUES (false);
    CREATE FUNCTION h_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
      PERFORM nextval('h_calls');
      IF (SELECT failing FROM h_switch) THEN
        RAISE EXCEPTION 'the business database refuses the batch (test switch)' USING ERRCODE = '53300';
      END IF;
      RETURN true;
    END $$;`);

  const kind = (handlerSql: string, shardSize: number, timeLimitMs = TIME_LIMIT_MS) => ({
    shardSize,
    maxAttempts: 5,
    backoffMs: 200,
    timeLimitMs,
    handler: { type: 'sql' as const, sql: handlerSql, database: 'orders' },
  });
  const codeDir = mkdtempSync(join(tmpdir(), 'tc-two-phase-code-'));
  writeFileSync(join(codeDir, 'killer.mjs'), KILLER_MODULE);
  const config: ConfigInput = {
    redisKeyPrefix: testKeyPrefix('two-phase'),
    poolSize: 3,
    businessDatabases: { orders: { url: server.url('orders'), poolSize: 3 } },
    breaker: { consecutiveFailures: 5, halfOpenAfterMs: 500, maxRetryDelayMs: 1000 },
    kinds: {
      [KIND.a]: kind(GUARDED_SQL, 500),
      [KIND.b]: kind(COUNTING_SQL, 100),
      [KIND.c]: kind(COUNTING_SQL, 100),
      [KIND.d]: kind(GUARDED_SQL, 100),
      [KIND.e]: kind(COUNTING_SQL, 100),
      [KIND.f]: kind(GUARDED_SQL, 100, F_TIME_LIMIT_MS),
      [KIND.h]: kind(GATED_SQL, 100),
      [KIND.g]: {
        shardSize: G_SHARD_SIZE,
        maxAttempts: G_MAX_ATTEMPTS,
        backoffMs: 200,
        timeLimitMs: TIME_LIMIT_MS,
        handler: { type: 'code', module: join(codeDir, 'killer.mjs'), database: 'orders' },
      },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 1000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 1000 },
    worker: { leaseMs: LEASE_MS, blockMs: 200, concurrency: 1, drainTimeoutMs: 3000 },
    alerts: { lagSlaMs: 600_000 },
  };
  configPath = writeConfig(config);
  env = { DATABASE_URL: centerUrl, REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env);
  if (migrated.code !== 0) throw new Error(`migrate failed (${migrated.code}): ${migrated.stderr}`);
  expect(await count(ordersPool, `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'timeout_center' AND tablename = 'markers'`)).toBe(1);
  coordinator = spawnCli('coordinator', ['coordinator', '--config', configPath], env);
  await coordinator.waitForMsg(/leader|elected/i, 30_000);
}, 120_000);

// A scenario's workers never outlive it (a failed one would take the next scenario's shards).
afterEach(() => stopProcesses(workers));

afterAll(async () => {
  await stopProcesses(workers);
  await killAll();
  for (const p of [centerPool, ordersPool]) await p?.end().catch(() => {});
  await stopAllServers();
});

describe('two-phase external runs: each timeout written once in the center, history = the business database', () => {
  it('A. happy path: 3,000 orders run in two phases, paid ones skipped, nothing left prepared', async () => {
    const [from, to] = [1, 3000];
    await seed(KIND.a, from, to, 10);
    const started = Date.now();
    // sleep(0) at every PREPARE: each hit on stderr is a shard run in two phases.
    const w = worker('worker-a', { concurrency: 2, failpoints: 'external.after-prepare=sleep(0)' });
    await w.waitForMsg(/external kinds run in two phases/, 20_000);
    expect(linesMatching(w, /external kinds run commit first/)).toEqual([]);
    await drained(KIND.a, from, to);
    const ms = Date.now() - started;
    const tally = await expectHistoryIsTruth(KIND.a, from, to);
    expect(tally).toEqual({ 'done/applied/closed': 2700, 'done/skipped/paid': 300 });
    const { rows: shards } = await centerPool.query<{ n: number; rerun: number; done: number; skipped: number }>(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE attempts > 1)::int AS rerun, sum(done_count)::int AS done, sum(skipped_count)::int AS skipped
         FROM timeout_center.shards WHERE kind = $1 AND done_count + skipped_count > 0`,
      [KIND.a],
    );
    expect(shards[0], 'shards with rows: none re-run, counts = the history').toMatchObject({ rerun: 0, done: 2700, skipped: 300 });
    expect(hits(w, 'external.after-prepare'), 'every shard with rows was PREPAREd (run in two phases)').toBe(shards[0]!.n);
    await expectNothingLeft();
    report('two-phase happy path', { tally, shards: shards[0], ms });
  });

  it('B. killed right after its PREPARE: another worker rolls the prepared run back, the shard runs again, every order closed once', async () => {
    const [from, to] = [10_001, 10_200];
    await seed(KIND.b, from, to, 10);
    const w1 = worker('worker-b1', { failpoints: 'external.after-prepare=1*kill' });
    expect((await w1.exited).signal).toBe('SIGKILL');
    // The resolver only looks at runs prepared for more than 3 s, and no worker is alive now.
    const left = await prepared();
    expect(left, 'the killed run is left prepared').toHaveLength(1);
    const shardId = shardOf(left[0]!);
    expect(
      await count(ordersPool, `SELECT count(*)::int AS n FROM orders WHERE id BETWEEN $1 AND $2 AND status = 'closed'`, [from, to]),
      'the business half never committed',
    ).toBe(0);
    const killedAt = Date.now();
    const w2 = worker('worker-b2');
    await w2.waitForMsg(/was rolled back: the shard runs again after its lease/, 20_000);
    const resolvedMs = Date.now() - killedAt;
    await drained(KIND.b, from, to);
    const tally = await expectHistoryIsTruth(KIND.b, from, to);
    expect(tally).toEqual({ 'done/applied/closed': 180, 'done/skipped/paid': 20 });
    const s = await shard(shardId);
    expect(s.state).toBe('done');
    // It ran again (commit first) after the rollback: its first committed claim came after the
    // kill, and counts as its attempt 1 (external_claim.sql: the rolled-back run left nothing).
    expect(s.claimedAtMs, `shard ${shardId} ran again after its lease`).toBeGreaterThan(killedAt);
    expect(s.attempts).toBe(1);
    expect(linesMatching(w2, /was committed: its marker is there/)).toEqual([]);
    await expectNothingLeft();
    report('two-phase, killed after prepare', { tally, shard: s, resolvedMs });
  });

  it('C. killed after the business commit, before COMMIT PREPARED: the resolver commits it, no order closed twice', async () => {
    const [from, to] = [20_001, 20_200];
    await seed(KIND.c, from, to, 10);
    const w1 = worker('worker-c1', { failpoints: 'external.after-apply-commit=1*kill' });
    expect((await w1.exited).signal).toBe('SIGKILL');
    const left = await prepared();
    expect(left, 'the killed run is left prepared').toHaveLength(1);
    const shardId = shardOf(left[0]!);
    const { rows: marker } = await ordersPool.query<{ shard_id: string }>('SELECT shard_id::text FROM timeout_center.markers');
    expect(
      marker.map((m) => Number(m.shard_id)),
      'the business half committed, with its marker',
    ).toEqual([shardId]);
    const closedBefore = await count(ordersPool, `SELECT count(*)::int AS n FROM orders WHERE id BETWEEN $1 AND $2 AND status = 'closed'`, [from, to]);
    expect(closedBefore).toBeGreaterThan(0);
    const killedAt = Date.now();
    const w2 = worker('worker-c2');
    await w2.waitForMsg(/was committed: its marker is there/, 20_000);
    const resolvedMs = Date.now() - killedAt;
    await drained(KIND.c, from, to);
    const tally = await expectHistoryIsTruth(KIND.c, from, to);
    expect(tally).toEqual({ 'done/applied/closed': 180, 'done/skipped/paid': 20 });
    const s = await shard(shardId);
    expect(s, `shard ${shardId}: committed by the resolver, never run again`).toMatchObject({ state: 'done', attempts: 1, done: closedBefore });
    expect(linesMatching(w2, /was rolled back/)).toEqual([]);
    await expectNothingLeft();
    report('two-phase, killed after the business commit', { tally, shard: s, closedBefore, resolvedMs });
  });

  it("D. a payer's cancel while a two-phase run holds the timeout waits for the run, then answers UPDATE 0; the order is closed, its timeout applied", async () => {
    const [from, to] = [30_001, 30_050];
    const target = 30_007;
    await seed(KIND.d, from, to);
    const payer = new pg.Client({ connectionString: centerUrl });
    payer.on('error', () => {});
    await payer.connect();
    try {
      const w1 = worker('worker-d1', { failpoints: 'external.after-apply=1*sleep(1500)' });
      await failpointHit(w1, 'external.after-apply');
      const t0 = performance.now();
      const cancelled = await payer.query(
        `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = $1 AND biz_id = $2 AND state = 'pending'`,
        [KIND.d, String(target)],
      );
      const waitedMs = performance.now() - t0;
      expect(cancelled.rowCount, 'the run closed the order: too late to cancel').toBe(0);
      expect(waitedMs, 'the cancel waited for the run (its handler slowed 1.5 s)').toBeGreaterThan(1000);
      expect(waitedMs, "bounded by the kind's time limit + 5 s").toBeLessThan(TIME_LIMIT_MS + TWO_PHASE_IDLE_MS);
      const { rows } = await ordersPool.query<{ status: string }>('SELECT status FROM orders WHERE id = $1', [target]);
      expect(rows[0]!.status, 'answered after the business commit').toBe('closed');
      await drained(KIND.d, from, to);
      const tally = await expectHistoryIsTruth(KIND.d, from, to);
      expect(tally).toEqual({ 'done/applied/closed': 50 });
      await expectNothingLeft();
      report('two-phase, cancel during the run', { waitedMs: Math.round(waitedMs), tally });
    } finally {
      await payer.end().catch(() => {});
    }
  });

  it('E. frozen (SIGSTOP) right after its PREPARE: rolled back once the server ends its business session, the shard runs again; resumed, the frozen worker changes nothing', async () => {
    const [from, to] = [40_001, 40_100];
    await seed(KIND.e, from, to, 10);
    const w1 = worker('worker-e1', { failpoints: 'external.after-prepare=1*pause' });
    await waitUntil(`${w1.name} stopped at external.after-prepare`, () => procState(w1.pid) === 'T', 20_000, 20);
    const frozenAt = Date.now();
    const left = await prepared();
    expect(left, 'the frozen run is prepared').toHaveLength(1);
    const shardId = shardOf(left[0]!);
    const w2 = worker('worker-e2');
    await w2.waitForMsg(/was rolled back: the shard runs again after its lease/, 30_000);
    const resolvedMs = Date.now() - frozenAt;
    // Not before the server ended the frozen run's business session (it held the marker's key).
    expect(resolvedMs, 'resolved once the frozen business session was ended').toBeGreaterThan(TIME_LIMIT_MS + TWO_PHASE_IDLE_MS - 1000);
    await drained(KIND.e, from, to);
    process.kill(w1.pid, 'SIGCONT');
    // The resumed worker's late statements (its business COMMIT on a session the server ended).
    await sleep(2000);
    const tally = await expectHistoryIsTruth(KIND.e, from, to);
    expect(tally).toEqual({ 'done/applied/closed': 90, 'done/skipped/paid': 10 });
    const s = await shard(shardId);
    expect(s.state).toBe('done');
    // It ran again (commit first) after the rollback: its first committed claim came after the
    // kill, and counts as its attempt 1 (external_claim.sql: the rolled-back run left nothing).
    expect(s.claimedAtMs, `shard ${shardId} ran again after its lease`).toBeGreaterThan(frozenAt);
    expect(s.attempts).toBe(1);
    await expectNothingLeft();
    report('two-phase, frozen after prepare', {
      tally,
      shard: s,
      resolvedMs,
      resumed: w1.alive ? 'alive' : `exited ${JSON.stringify(await w1.exited)}`,
      resumedWarnings: w1.lines
        .filter((l) => (l.level ?? 0) >= 40)
        .map((l) => `${String(l.msg)}${l['err'] ? ` (${JSON.stringify(l['err']).slice(0, 200)})` : ''}`),
    });
  }, 60_000);

  it('F. the unsafe payment order (pay, then cancel) against a two-phase run: the run backs out, the cancel goes through, the paid order is never closed', async () => {
    const [from, to] = [50_001, 50_050];
    const target = 50_007;
    await seed(KIND.f, from, to);
    const payerOrders = new pg.Client({ connectionString: server.url('orders') });
    const payerCenter = new pg.Client({ connectionString: centerUrl });
    for (const c of [payerOrders, payerCenter]) {
      c.on('error', () => {});
      await c.connect();
    }
    try {
      // Slowed right after its claim: the shard's timeouts are claimed (moved, uncommitted) and
      // locked before the payer starts, and its handler reaches the orders after the payment.
      const w1 = worker('worker-f1', { failpoints: 'external.after-claim=1*sleep(800);external.after-prepare=sleep(0)' });
      await failpointHit(w1, 'external.after-claim');
      // A two-phase claim holds the timeout locked (a commit-first claim commits and holds none).
      const lock = await centerPool
        .query(`SELECT id FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2 FOR UPDATE NOWAIT`, [KIND.f, String(target)])
        .then(
          () => 'free',
          (err: unknown) => String((err as { code?: unknown }).code ?? err),
        );
      expect(lock, 'the two-phase run holds the timeout locked in the center').toBe('55P03');
      // The payer, in the unsafe order: the order's row lock first (business database), then the
      // timeout's (center), the opposite of the run's.
      const t0 = performance.now();
      await payerOrders.query('BEGIN');
      const paid = await payerOrders.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [target]);
      const t1 = performance.now();
      const cancelled = await payerCenter.query(
        `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = $1 AND biz_id = $2 AND state = 'pending'`,
        [KIND.f, String(target)],
      );
      const cancelMs = performance.now() - t1;
      await payerOrders.query('COMMIT');
      const payerMs = performance.now() - t0;
      expect(paid.rowCount, 'the payment went through (no close had reached the order)').toBe(1);
      expect(cancelMs, 'the cancel waited for the two-phase run').toBeGreaterThan(300);
      // The SQL handler gives up its lock wait on the paid order after 100 ms (HANDLER_LOCK_TIMEOUT_MS,
      // 55P03, a batch failure): the run backs out long before its statement_timeout (the time limit).
      expect(cancelMs, "ended by the handler's lock_timeout, not its time limit").toBeLessThan(F_TIME_LIMIT_MS);
      expect(payerMs, "the payer's whole sequence: bounded by the kind's time limit + 5 s").toBeLessThan(F_TIME_LIMIT_MS + TWO_PHASE_IDLE_MS);
      await drained(KIND.f, from, to);
      const { rows: order } = await ordersPool.query<{ status: string; closes: number }>('SELECT status, closes FROM orders WHERE id = $1', [target]);
      expect(order[0], 'the paid order was never closed').toEqual({ status: 'paid', closes: 0 });
      const tally = await expectHistoryIsTruth(KIND.f, from, to);
      // UPDATE 1: the timeout never acts; UPDATE 0: a run held it, and the guard skipped the paid order.
      const payerTimeout = cancelled.rowCount === 1 ? 'cancelled/-/paid' : 'done/skipped/paid';
      expect(tally).toEqual({ 'done/applied/closed': 49, [payerTimeout]: 1 });
      const { rows: shards } = await centerPool.query<{ id: number; state: string; attempts: number; done: number; skipped: number }>(
        `SELECT id::int, state, attempts, done_count AS done, skipped_count AS skipped FROM timeout_center.shards
          WHERE kind = $1 AND done_count + skipped_count + failed_count + retried_count > 0 ORDER BY id`,
        [KIND.f],
      );
      if (cancelled.rowCount === 1) {
        // The shard's one run: its two-phase attempt backed out before any PREPARE, and it ran again
        // at once (same lease) commit first, without the cancelled timeout.
        expect(shards.map(({ state, attempts, done, skipped }) => ({ state, attempts, done, skipped }))).toEqual([
          { state: 'done', attempts: 1, done: 49, skipped: 0 },
        ]);
        expect(hits(w1, 'external.after-prepare'), 'the two-phase attempt backed out (never PREPAREd)').toBe(0);
      }
      await expectNothingLeft();
      report('two-phase, unsafe payment order (pay, then cancel)', {
        cancel: `UPDATE ${cancelled.rowCount ?? '?'}`,
        cancelWaitMs: Math.round(cancelMs),
        payerMs: Math.round(payerMs),
        tally,
        shards,
        prepares: hits(w1, 'external.after-prepare'),
      });
    } finally {
      await payerOrders.query('ROLLBACK').catch(() => {});
      for (const c of [payerOrders, payerCenter]) await c.end().catch(() => {});
    }
  });

  it('G. a row that kills its worker, on the two-phase path, while more orders come due: it alone fails, every other order closed once, the deaths bounded', async () => {
    const [from, to] = [60_001, 60_400];
    // 200 orders due now (every 10th paid), the killer among them; 200 more coming due one every
    // 100 ms meanwhile, as in any live kind: the killer's shard is isolated while other rows are due.
    await seed(KIND.g, from, 60_200, 10);
    await seed(KIND.g, 60_201, to, 10, 100);
    const started = Date.now();
    let running = true;
    const deaths: string[] = [];
    const unexpected: string[] = [];
    const prepares: number[] = [];
    // A supervisor per slot: a new worker for each that dies (poison.test.ts 7b).
    const keep = async (name: string): Promise<void> => {
      for (let i = 0; running; i += 1) {
        const w = worker(`${name}-${i}`, { failpoints: 'external.after-prepare=sleep(0)' });
        const { code, signal } = await w.exited;
        prepares.push(hits(w, 'external.after-prepare'));
        const run = /^killer: (.*)$/m.exec(w.stderr)?.[1];
        if (signal === 'SIGKILL' && run) deaths.push(run);
        else if (running) unexpected.push(`${w.name} exited with ${code ?? signal}: ${w.stderr.slice(-500)}`);
      }
    };
    const supervisors = ['worker-g1', 'worker-g2', 'worker-g3'].map(keep);
    try {
      await waitUntil('a first worker death', () => deaths.length > 0, 20_000, 10);
      const first = /^shard (\d+) attempt (\d+) items (\d+)$/.exec(deaths[0]!);
      expect(first, `killer line: ${deaths[0]}`).not.toBeNull();
      const [shardId, attempt] = [Number(first![1]), Number(first![2])];
      expect(attempt, 'the first death is a first run').toBe(1);
      // A commit-first claim commits before the handler (claimed_at, held_ids); a two-phase one is
      // rolled back with its run: nothing of it is seen, the killer's timeout is plainly pending.
      const { rows: s0 } = await centerPool.query<{ unclaimed: boolean; held: boolean }>(
        'SELECT claimed_at IS NULL AS unclaimed, held_ids IS NOT NULL AS held FROM timeout_center.shards WHERE id = $1',
        [shardId],
      );
      expect(s0[0], `shard ${shardId}: its first run died in two phases, its claim rolled back`).toEqual({ unclaimed: true, held: false });
      const { rows: k0 } = await centerPool.query<{ state: string; attempts: number }>(
        'SELECT state, attempts FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2',
        [KIND.g, String(G_KILLER)],
      );
      expect(k0[0]).toEqual({ state: 'pending', attempts: 0 });

      // Until every timeout is final, no row may be left dispatched under a shard that has ended
      // (a split's halves hold their rows dispatched: each half must run its own).
      let stranded: Stranded[] = [];
      await waitUntil(
        `timeouts of ${KIND.g} final, or one stranded`,
        async () => {
          stranded = await strandedRows(KIND.g);
          return stranded.length > 0 || (await unfinished(KIND.g, from, to)) === 0;
        },
        60_000,
        100,
      );
      expect(stranded, `no timeout left dispatched under an ended shard (deaths: ${deaths.join('; ')})`).toEqual([]);
      await drained(KIND.g, from, to);
      const ms = Date.now() - started;
      const { rows: killer } = await centerPool.query<{ state: string; last_error: string | null }>(
        'SELECT state, last_error FROM timeout_center.all_timeouts WHERE kind = $1 AND biz_id = $2',
        [KIND.g, String(G_KILLER)],
      );
      expect(killer.map((k) => k.state)).toEqual(['failed']);
      expect(killer[0]!.last_error).toMatch(/abandoned after \d+ attempts/);
      const tally = await expectHistoryIsTruth(KIND.g, from, to);
      expect(tally, 'the killer alone failed; every other unpaid order closed once').toEqual({
        'done/applied/closed': 359,
        'done/skipped/paid': 40,
        'failed/-/unpaid': 1,
      });
      expect(unexpected).toEqual([]);
      // The killer's shard: its first run and its first re-run (which claims afresh), one death per
      // level of the split (10 -> 5 -> 3 -> 2 -> 1) and the kind's attempts on the last: about 8.
      // Until that first dead shard is handed on (goneAfterMs), the kind's first runs stay in two
      // phases and the killer is a plain pending row after each death: more first runs die claiming
      // it (seen: 6 to 8 with all rows due at once, up to 10 with rows coming due).
      expect(deaths.length, `worker deaths: ${deaths.join('; ')}`).toBeLessThanOrEqual(25);
      const splits = await count(
        centerPool,
        `SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = $1 AND error_sample LIKE 'split into shards%'`,
        [KIND.g],
      );
      running = false;
      await stopProcesses(workers);
      await Promise.all(supervisors);
      await expectNothingLeft();
      report('two-phase, a row that kills its worker', {
        tally,
        workerDeaths: deaths.length,
        deaths,
        splits,
        prepares: prepares.reduce((a, b) => a + b, 0),
        ms,
      });
    } finally {
      running = false;
      await stopProcesses(workers);
      await Promise.all(supervisors);
    }
  }, 120_000);
  it('H. a handler that fails as a batch in a two-phase run is called once per run: the commit-first run records the retry without calling it again', async () => {
    const [from, to] = [70_001, 70_050];
    await ordersPool.query('UPDATE h_switch SET failing = true');
    const callsBefore = await count(ordersPool, 'SELECT CASE WHEN is_called THEN last_value ELSE 0 END::int AS n FROM h_calls');
    await seed(KIND.h, from, to, 10);
    const w = worker('worker-h');
    // The first run's failure recorded (a retry: the rows back to pending with an error), then the
    // switch goes off: the retry closes them.
    await waitUntil(
      'a shard of the kind recorded its batch failure as retries',
      async () => (await count(centerPool, 'SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = $1 AND retried_count > 0', [KIND.h])) > 0,
      20_000,
      10,
    );
    await ordersPool.query('UPDATE h_switch SET failing = false');
    await drained(KIND.h, from, to);
    const calls = (await count(ordersPool, 'SELECT last_value::int AS n FROM h_calls')) - callsBefore;
    const { rows } = await centerPool.query<{ failed: number; succeeded: number }>(
      `SELECT count(*) FILTER (WHERE retried_count > 0)::int AS failed,
              count(*) FILTER (WHERE coalesce(retried_count, 0) = 0 AND done_count + skipped_count > 0)::int AS succeeded
         FROM timeout_center.shards WHERE kind = $1`,
      [KIND.h],
    );
    const runs = rows[0]!;
    expect(runs.failed, 'shard runs that failed as a batch').toBeGreaterThanOrEqual(1);
    expect(calls, `handler calls: one per shard run with rows (${JSON.stringify(runs)})`).toBe(runs.failed + runs.succeeded);
    const tally = await expectHistoryIsTruth(KIND.h, from, to);
    expect(tally).toEqual({ 'done/applied/closed': 45, 'done/skipped/paid': 5 });
    expect(linesMatching(w, /external batch failed as a whole/).length, 'the failure logged once per failed run').toBe(runs.failed);
    await expectNothingLeft();
    report('two-phase, a handler failing as a batch', { calls, ...runs });
  });
});
