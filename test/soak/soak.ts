// The soak: a chaos run of our own, beyond the scripted faults (issue 24, point 7). Not part of
// `npm test`: `npm run soak -- --minutes 10 [--seed 7] [--out soak.json]`.
//
// Two coordinators and three workers as processes, restarted when they die; the center on the shared
// PostgreSQL (a database of its own), a business database on a private PostgreSQL instance, a
// private Redis. Two kinds: order.unpaid closes orders in the center's database (the same-database
// path), order.remote closes orders in the business database (the external path). Each close counts
// itself (orders.closes), so a second effect shows. Steady arrivals with a flood every 30 s,
// payers at the due instant the README's way (cancel first, then the guarded UPDATE whose row count
// decides), reschedules. A nemesis acts every 3-6 s: SIGKILL a process, SIGSTOP one past its lease,
// restart Redis empty, restart the business PostgreSQL with -m immediate, or terminate the center's
// backends. Then a drain, and the four invariants per database plus history = business truth.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
// Runs on Node's own TypeScript support (like bench/): .ts paths, and the engine from dist/.
import type { ConfigInput } from '../../dist/config.js';
import { cancel, reschedule } from '../../dist/schedule.js';
import { createOrdersSchema, writeConfig } from '../helpers/orders.ts';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.ts';
import { startPostgres, startRedis, stopAllServers } from '../helpers/servers.ts';
import { createTestDatabase } from '../helpers/services.ts';

const LOCAL = 'order.unpaid';
const REMOTE = 'order.remote';
const LEASE_MS = 3000;
const COUNTED_CLOSE = "UPDATE orders SET status = 'closed', closed_at = now(), closes = closes + 1 WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";

const { values: args } = parseArgs({
  options: { minutes: { type: 'string', default: '10' }, seed: { type: 'string', default: '1' }, out: { type: 'string' } },
});
const minutes = Number(args.minutes);
if (!Number.isFinite(minutes) || minutes <= 0) throw new Error(`--minutes must be a positive number, got ${args.minutes}`);

// A small seeded PRNG (mulberry32): the same seed injects the same sequence of faults.
let seed = Number(args.seed) >>> 0;
function random(): number {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stdout.write(`[soak ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

function quietPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 5000 });
  pool.on('error', () => {});
  return pool;
}

interface Fault {
  type: string;
  target?: string;
  startMs: number;
  endMs: number;
}

async function main(): Promise<void> {
  const started = Date.now();
  const redis = await startRedis();
  const business = await startPostgres();
  const center = await createTestDatabase('soak');
  const admin = quietPool(business.url(), 1);
  await admin.query('CREATE DATABASE orders');
  await admin.end();
  const centerPool = quietPool(center.url, 8);
  const ordersPool = quietPool(business.url('orders'), 8);
  for (const pool of [centerPool, ordersPool]) {
    await createOrdersSchema(pool);
    await pool.query('ALTER TABLE orders ADD COLUMN closes int NOT NULL DEFAULT 0');
  }
  const config: ConfigInput = {
    redisKeyPrefix: 'soak',
    poolSize: 4,
    businessDatabases: { orders: { urlEnv: 'ORDERS_URL', poolSize: 4 } },
    breaker: { consecutiveFailures: 3, halfOpenAfterMs: 1000, maxRetryDelayMs: 3000 },
    kinds: {
      [LOCAL]: { shardSize: 200, maxAttempts: 10, backoffMs: 200, timeLimitMs: 2000, handler: { type: 'sql', sql: COUNTED_CLOSE } },
      [REMOTE]: { shardSize: 200, maxAttempts: 10, backoffMs: 200, timeLimitMs: 2000, handler: { type: 'sql', sql: COUNTED_CLOSE, database: 'orders' } },
    },
    coordinator: { lockTtlMs: 2000, republishAfterMs: 2000, maxInFlightShards: 16, minTickIntervalMs: 50, lagCheckIntervalMs: 2000 },
    worker: { leaseMs: LEASE_MS, blockMs: 200, concurrency: 3, drainTimeoutMs: 2000 },
    alerts: { lagSlaMs: 600_000 },
  };
  const configPath = writeConfig(config);
  const env = { DATABASE_URL: center.url, REDIS_URL: redis.url, ORDERS_URL: business.url('orders'), TC_FAILPOINTS: undefined, LOG_LEVEL: 'warn' };
  const migrated = await runCli(['migrate', '--config', configPath], env);
  if (migrated.code !== 0) throw new Error(`migrate failed: ${migrated.stderr}`);

  // The fleet, each process restarted when it dies.
  const roles: { name: string; role: 'coordinator' | 'worker' }[] = [
    { name: 'coordinator-1', role: 'coordinator' },
    { name: 'coordinator-2', role: 'coordinator' },
    { name: 'worker-1', role: 'worker' },
    { name: 'worker-2', role: 'worker' },
    { name: 'worker-3', role: 'worker' },
  ];
  const fleet = new Map<string, CliProcess>();
  let running = true;
  const launch = (name: string, role: 'coordinator' | 'worker') => {
    const p = spawnCli(name, [role, '--config', configPath], env);
    fleet.set(name, p);
    void p.exited.then(async () => {
      if (!running) return;
      await sleep(500);
      if (running) launch(name, role);
    });
  };
  for (const r of roles) launch(r.name, r.role);

  // Arrivals: every 100 ms, 20 orders of each kind due in 1-3 s; every 30 s a flood of 3,000 due at
  // one instant. Each order's id is unique across both databases.
  let nextId = 1;
  let orders = 0;
  const insert = async (n: number, dueSql: string) => {
    const from = nextId;
    nextId += 2 * n;
    const local = `SELECT g FROM generate_series(${from}, ${from + n - 1}) g`;
    const remote = `SELECT g FROM generate_series(${from + n}, ${from + 2 * n - 1}) g`;
    await centerPool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM (${local}) s (g)`);
    await ordersPool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM (${remote}) s (g)`);
    await centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, ${dueSql} FROM (${local}) s (g)`, [LOCAL]);
    // Scheduled from elsewhere: the timeout is written first, then the order (README 3b) above.
    await centerPool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, ${dueSql} FROM (${remote}) s (g)`, [REMOTE]);
    orders += 2 * n;
  };
  const loops: Promise<void>[] = [];
  let loopErrors = 0;
  const every = (ms: number, fn: () => Promise<void>) =>
    loops.push(
      (async () => {
        while (running) {
          const t = Date.now();
          // A statement that meets a fault (a restart, a terminated session) is tried next round.
          await fn().catch((err: unknown) => {
            loopErrors += 1;
            if (loopErrors <= 5) log(`load statement failed (tried again next round): ${(err as Error).message}`);
          });
          await sleep(Math.max(0, ms - (Date.now() - t)));
        }
      })(),
    );
  every(100, () => insert(20, `now() + (1 + random() * 2) * interval '1 second'`));
  every(30_000, async () => {
    await sleep(5000);
    if (running) await insert(1500, `date_trunc('second', now()) + interval '3 seconds'`);
  });

  // Payers at the due instant, the README's way; 30 % of the orders (id % 10 < 3).
  const payments = { paid: 0, refused: 0, cancelled: 0, errors: 0 };
  const paidIds = new Set<number>();
  const payingNow = new Set<number>();
  every(50, async () => {
    const { rows } = await centerPool.query<{ kind: string; biz_id: string }>(
      `SELECT kind, biz_id FROM timeout_center.timeouts
        WHERE state IN ('pending', 'dispatched') AND due_at BETWEEN now() - interval '60 ms' AND now() + interval '60 ms'
          AND biz_id::bigint % 10 < 3 LIMIT 100`,
    );
    await Promise.all(
      rows.map(async (r) => {
        const id = Number(r.biz_id);
        if (payingNow.has(id) || paidIds.has(id)) return;
        payingNow.add(id);
        try {
          if (r.kind === LOCAL) {
            // One transaction in the center's database: cancel first, then the guarded payment.
            const client = await centerPool.connect();
            try {
              await client.query('BEGIN');
              const cancelled = await cancel(client, LOCAL, id);
              const paid = await client.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
              await client.query('COMMIT');
              if (cancelled) payments.cancelled += 1;
              if (paid.rowCount === 1) {
                payments.paid += 1;
                paidIds.add(id);
              } else payments.refused += 1;
            } catch (err) {
              await client.query('ROLLBACK').catch(() => {});
              throw err;
            } finally {
              client.release();
            }
          } else {
            // Two databases: cancel in the center first, then the guarded payment in the orders'.
            if (await cancel(centerPool, REMOTE, id)) payments.cancelled += 1;
            const paid = await ordersPool.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
            if (paid.rowCount === 1) {
              payments.paid += 1;
              paidIds.add(id);
            } else payments.refused += 1;
          }
        } catch {
          payments.errors += 1; // a payer hit a restart: the customer retries (the next loop may)
        } finally {
          payingNow.delete(id);
        }
      }),
    );
  });

  // Reschedules: a few pending timeouts moved 2 s later every second.
  let rescheduled = 0;
  every(1000, async () => {
    const { rows } = await centerPool.query<{ kind: string; biz_id: string }>(
      `SELECT kind, biz_id FROM timeout_center.timeouts WHERE state = 'pending' AND due_at > now() + interval '500 ms' AND biz_id::bigint % 10 = 9 LIMIT 10`,
    );
    for (const r of rows) if (await reschedule(centerPool, r.kind, r.biz_id, { delayMs: 2000 })) rescheduled += 1;
  });

  // The nemesis.
  const faults: Fault[] = [];
  const nemesis = (async () => {
    await sleep(5000);
    while (running && Date.now() - started < minutes * 60_000) {
      const action = pick(['kill', 'kill', 'stop', 'stop', 'redis', 'business-pg', 'terminate'] as const);
      const startMs = Date.now();
      const victim = pick([...fleet.entries()]);
      try {
        if (action === 'kill') {
          victim[1].kill('SIGKILL');
          faults.push({ type: 'SIGKILL', target: victim[0], startMs, endMs: Date.now() + LEASE_MS });
        } else if (action === 'stop') {
          const pid = victim[1].pid;
          process.kill(pid, 'SIGSTOP');
          await sleep(2 * LEASE_MS);
          try {
            process.kill(pid, 'SIGCONT');
          } catch {
            // it died meanwhile
          }
          faults.push({ type: 'SIGSTOP past the lease', target: victim[0], startMs, endMs: Date.now() + LEASE_MS });
        } else if (action === 'redis') {
          await redis.kill();
          await sleep(500);
          await redis.start();
          faults.push({ type: 'Redis restarted empty', startMs, endMs: Date.now() + 2000 });
        } else if (action === 'business-pg') {
          await business.restart('immediate');
          faults.push({ type: 'business PostgreSQL restarted -m immediate', startMs, endMs: Date.now() + 2000 });
        } else {
          await centerPool.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'timeout-center%'`,
          );
          faults.push({ type: 'center backends terminated', startMs, endMs: Date.now() + 2000 });
        }
      } catch (err) {
        log(`nemesis ${action} failed: ${(err as Error).message}`);
      }
      log(`fault: ${faults.at(-1)?.type ?? action}${faults.at(-1)?.target ? ` (${faults.at(-1)!.target})` : ''}`);
      await sleep(3000 + random() * 3000);
    }
  })();

  await sleep(minutes * 60_000);
  await nemesis;
  running = false;
  await Promise.all(loops);
  log(`arrivals stopped: ${orders} orders, ${faults.length} faults; draining`);
  for (const p of fleet.values()) {
    try {
      process.kill(p.pid, 'SIGCONT');
    } catch {
      // gone
    }
  }
  // Keep a full fleet for the drain (restarts were turned off with `running`).
  for (const r of roles) if (!fleet.get(r.name)?.alive) launch(r.name, r.role);
  const drainStarted = Date.now();
  for (;;) {
    const { rows } = await centerPool.query<{ open: number; scans: number }>(
      `SELECT (SELECT count(*) FROM timeout_center.timeouts WHERE state NOT IN ('done', 'cancelled', 'failed'))::int AS open,
              (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int AS scans`,
    );
    if (rows[0]!.open === 0 && rows[0]!.scans === 0) break;
    if (Date.now() - drainStarted > 300_000) {
      log(`drain not finished after 300 s: ${JSON.stringify(rows[0])}`);
      break;
    }
    await sleep(500);
  }
  const drainMs = Date.now() - drainStarted;
  await sleep(2000); // late statements of anything that was frozen
  for (const p of fleet.values()) p.kill('SIGTERM');
  await Promise.all([...fleet.values()].map((p) => p.exited));

  const result = await check(centerPool, ordersPool, faults, paidIds);
  const report = {
    minutes,
    seed: Number(args.seed),
    orders,
    payments,
    rescheduled,
    loadStatementsFailed: loopErrors,
    faults: faults.length,
    faultsByType: faults.reduce<Record<string, number>>((acc, f) => ((acc[f.type] = (acc[f.type] ?? 0) + 1), acc), {}),
    drainMs,
    ...result,
  };
  console.log(JSON.stringify(report, null, 2));
  if (args.out) {
    mkdirSync(dirname(args.out), { recursive: true });
    writeFileSync(args.out, JSON.stringify(report, null, 2));
  }
  await centerPool.end();
  await ordersPool.end();
  await killAll();
  await stopAllServers();
  await center.drop().catch(() => {});
  process.exitCode = Object.values(result.violations).some((v) => v.count > 0) ? 1 : 0;
}

/** The invariants per database, history = truth, and lateness outside the fault windows. */
async function check(centerPool: pg.Pool, ordersPool: pg.Pool, faults: Fault[], paidIds: Set<number>) {
  const violations: Record<string, { count: number; sample: string[] }> = {};
  const add = (name: string, ids: string[]) => (violations[name] = { count: ids.length, sample: ids.slice(0, 10) });
  const ids = async (pool: pg.Pool, sql: string, params: unknown[] = []) => (await pool.query<{ id: string }>(sql, params)).rows.map((r) => String(r.id));

  add(
    'I1 lost (due, not final)',
    await ids(centerPool, `SELECT id FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed')`),
  );
  for (const [db, pool] of [
    ['center', centerPool],
    ['business', ordersPool],
  ] as const) {
    add(
      `I2 ${db}: closed more than once`,
      await ids(pool, `SELECT id FROM orders WHERE closes > 1 UNION SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1`),
    );
    add(`I3 ${db}: paid order closed`, await ids(pool, `SELECT order_id AS id FROM order_transitions WHERE from_status = 'paid'`));
    add(
      `I3 ${db}: payer told paid, order not paid`,
      await ids(pool, `SELECT id FROM orders WHERE id = ANY($1::bigint[]) AND status <> 'paid'`, [[...paidIds]]),
    );
  }
  add(
    'I4 reduce totals != failed rows',
    await ids(
      centerPool,
      `SELECT 'failed' AS id WHERE (SELECT coalesce(sum(failed), 0) FROM timeout_center.scans WHERE state = 'reduced') <> (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed')`,
    ),
  );
  // History = business truth, per order: closed by us <=> its timeout done/applied; a cancelled
  // timeout's order not closed by us.
  const history = new Map<string, string>();
  for (const r of (
    await centerPool.query<{ kind: string; biz_id: string; state: string; result: string | null }>(
      `SELECT DISTINCT ON (kind, biz_id) kind, biz_id, state, result FROM timeout_center.all_timeouts ORDER BY kind, biz_id, id DESC`,
    )
  ).rows)
    history.set(`${r.kind}/${r.biz_id}`, r.state === 'done' ? `done/${r.result}` : r.state);
  const mismatch: string[] = [];
  const cancelledClosed: string[] = [];
  let closed = 0;
  for (const [kind, pool] of [
    [LOCAL, centerPool],
    [REMOTE, ordersPool],
  ] as const) {
    for (const o of (await pool.query<{ id: string; status: string }>(`SELECT id::text, status FROM orders`)).rows) {
      const h = history.get(`${kind}/${o.id}`) ?? 'none';
      if (o.status === 'closed') closed += 1;
      if ((o.status === 'closed') !== (h === 'done/applied')) mismatch.push(`${kind}/${o.id}: order ${o.status}, timeout ${h}`);
      if (h === 'cancelled' && o.status === 'closed') cancelledClosed.push(`${kind}/${o.id}`);
    }
  }
  add('history != truth (closed <=> applied)', mismatch);
  add('cancelled timeout, order closed', cancelledClosed);

  // Lateness at commit of timeouts not due near a fault: their shard's finished_at (stamped by the
  // last statement before its COMMIT; a row's own finished_at is written earlier in the shard's
  // transaction) - due_at.
  const windows = faults.map((f) => [f.startMs - 1000, f.endMs + LEASE_MS] as const);
  const { rows } = await centerPool.query<{ due_ms: string; late_ms: number }>(
    `SELECT (extract(epoch FROM d.due_at) * 1000)::int8::text AS due_ms,
            extract(epoch FROM greatest(d.finished_at, s.finished_at) - d.due_at)::float8 * 1000 AS late_ms
       FROM timeout_center.done_timeouts d LEFT JOIN timeout_center.shards s ON s.id = d.shard_id`,
  );
  const clean = rows
    .filter((r) => !windows.some(([a, b]) => Number(r.due_ms) >= a && Number(r.due_ms) <= b))
    .map((r) => r.late_ms)
    .sort((a, b) => a - b);
  const q = (p: number) => (clean.length ? Math.round(clean[Math.min(clean.length - 1, Math.floor(p * clean.length))]!) : null);
  const failed = Number(
    (await centerPool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE state = 'failed'`)).rows[0]!.n,
  );
  return {
    closed,
    failed,
    lateness: { outsideFaults: clean.length, p50Ms: q(0.5), p99Ms: q(0.99), maxMs: clean.length ? Math.round(clean.at(-1)!) : null },
    violations,
  };
}

main().catch(async (err: unknown) => {
  console.error(err);
  await killAll().catch(() => {});
  await stopAllServers().catch(() => {});
  process.exit(2);
});
process.on('SIGINT', () => {
  void killAll()
    .then(() => stopAllServers())
    .finally(() => process.exit(130));
});
