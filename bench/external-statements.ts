// npm run bench:external-statements [-- options]: what each statement of the external path costs per
// timeout, on one connection with nothing else running, against the same-database claim on the same
// rows. On a fresh private PostgreSQL instance (fsync off, as every bench's): N due timeouts and their
// orders (90 % unpaid) in one database; then, round by round,
//   external        N / K shards claimed one after another (external_claim_lock, external_claim and
//                   external_unhold in one transaction, as the worker sends them), each claim
//                   walking past the rows the earlier ones hold; then each shard's orders closed
//                   (the close the business database runs: bench/lib/orders.ts CLOSE_MANY_SQL); then
//                   each shard recorded (external_record, every row applied or skipped)
//   two-phase       the same rows again, as a first run in two phases (src/worker/two-phase.ts) takes
//                   them: each shard's claim locking its rows (external_two_phase_claim), its close,
//                   its move of the rows to the history, applied or skipped
//                   (external_two_phase_move), in one transaction (the product PREPAREs it before the
//                   business commit)
//   same-database   the same rows again, drained by claim.sql's batch form (the close inside it),
//                   N / K shards one after another
// and prints microseconds per timeout of each statement, the external path's in all (center and
// business), and their ratio: on a box where CPU is the bound, about what the external path can
// reach against the same-database one (docs/benchmarks.md, "Business databases and stores").
//
//   --n <count>          due timeouts (default 40,000)
//   --k <rows>           rows per shard (default 5,000, the external path's largest shard)
//   --rounds <r>         rounds (default 2)
//   --help               this text
import { parseArgs } from 'node:util';
import pg from 'pg';
// dist/: npm run bench:external-statements builds first.
import { parseConfig } from '../dist/config.js';
import { AS_TEXT } from '../dist/db/pg-text.js';
import { migrate } from '../dist/db/migrate.js';
import { syncKinds } from '../dist/db/kinds.js';
import { sql, statementValues } from '../dist/db/queries.js';
import { createLogger } from '../dist/observability/logger.js';
import { bindLiterals } from '../dist/worker/bind-literals.js';
import { batchSqlHandler } from '../dist/worker/sql-handler.js';
import { startPostgres, stopAllServers } from '../test/helpers/servers.ts';
import { CLOSE_MANY_SQL, KIND, ORDERS_DDL, insertOrders } from './lib/orders.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';

const TOOL = 'bench:external-statements';
const { values: args } = parseArgs({
  options: { n: { type: 'string' }, k: { type: 'string' }, rounds: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false } },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const { n: N, k: K, rounds: ROUNDS } = positiveCounts(TOOL, args, { n: 40_000, k: 5_000, rounds: 2 });
if (N % K !== 0) failUsage(TOOL, `--n (${N}) must be a multiple of --k (${K})`);
const SHARDS = N / K;

const server = await startPostgres();
try {
  const admin = new pg.Client({ connectionString: server.url() });
  await admin.connect();
  await admin.query('CREATE DATABASE external_statements');
  await admin.end();
  const pool = new pg.Pool({ connectionString: server.url('external_statements'), max: 2 });
  await migrate(pool, createLogger('silent'));
  await syncKinds(pool, parseConfig({ kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_MANY_SQL } } } }).kinds);
  await pool.query(ORDERS_DDL);
  const batch = await batchSqlHandler(pool, CLOSE_MANY_SQL, 60_000);
  if (!batch) throw new Error('the close statement has no batch form; see src/worker/sql-handler.ts');
  const c = await pool.connect();

  /** Fresh rows: N orders and their timeouts, due a second ago, vacuumed and checkpointed. */
  const seed = async () => {
    await c.query('TRUNCATE timeout_center.timeouts, timeout_center.done_timeouts, timeout_center.shards, timeout_center.scans CASCADE');
    await c.query('TRUNCATE orders');
    await insertOrders(pool, 1, N, new Date());
    await c.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() - interval '1 second' FROM generate_series(1, $2::int) g`,
      [KIND, N],
    );
    await c.query('VACUUM ANALYZE timeout_center.timeouts');
    await c.query('VACUUM ANALYZE orders');
    await c.query('CHECKPOINT');
  };
  /** SHARDS running shards of one scan, leased (what take_lease.sql leaves for a worker). */
  const shards = async () => {
    const { rows: scan } = await c.query<{ id: string }>(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, $1, now()) RETURNING id`, [
      TOOL,
    ]);
    const { rows } = await c.query<{ id: string; lease_token: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state, lease_token, lease_expires_at, attempts, started_at)
       SELECT $1, $2, g, 0, $3, 'running', gen_random_uuid(), now() + interval '1 hour', 1, now() FROM generate_series(1, $4::int) g
       RETURNING id, lease_token`,
      [scan[0]!.id, KIND, K, SHARDS],
    );
    return rows.map((r) => ({ id: Number(r.id), token: r.lease_token }));
  };
  const timed = async <T>(work: () => Promise<T>): Promise<[T, number]> => {
    const started = performance.now();
    const out = await work();
    return [out, performance.now() - started];
  };
  /** Every timeout moved to the history, the unpaid orders' applied, the paid ones' skipped, each
   *  unpaid order closed once: a bench that drains wrongly measures nothing. */
  const checkDrained = async (what: string) => {
    const { rows } = await c.query<{ left: number; applied: number; skipped: number; closed: number; twice: number }>(
      `SELECT (SELECT count(*)::int FROM timeout_center.timeouts) AS left,
              (SELECT count(*)::int FROM timeout_center.done_timeouts WHERE result = 'applied') AS applied,
              (SELECT count(*)::int FROM timeout_center.done_timeouts WHERE result = 'skipped') AS skipped,
              (SELECT count(*)::int FROM orders WHERE status = 'closed') AS closed,
              (SELECT count(*)::int FROM orders WHERE closes > 1) AS twice`,
    );
    const r = rows[0]!;
    const paid = Math.floor(N / 10);
    if (r.left !== 0 || r.applied !== N - paid || r.skipped !== paid || r.closed !== N - paid || r.twice !== 0)
      throw new Error(`${what} drained wrongly: ${JSON.stringify(r)} (expected ${N - paid} applied and closed once, ${paid} skipped, none left)`);
  };
  const perTimeout = (ms: number) => (ms * 1000) / N;
  /** The business close (the handler's statement, as the business database runs it). */
  const close = (bizIds: string[] | string) => c.query<{ id: string }>(CLOSE_MANY_SQL, [bizIds]);
  const f = (us: number) => us.toFixed(2);

  for (let round = 1; round <= ROUNDS; round += 1) {
    await seed();
    const ms = { lock: 0, claim: 0, unhold: 0, close: 0, record: 0 };
    const claimEach: number[] = [];
    const claimed: { shard: { id: number; token: string }; bizIds: string[]; applied: string[] }[] = [];
    for (const shard of await shards()) {
      await c.query('BEGIN');
      ms.lock += (await timed(() => c.query(bindLiterals(sql('worker/external_claim_lock', { shardId: shard.id })))))[1];
      const [claim, claimMs] = await timed(() =>
        c.query<{ biz_ids: string[] }>(
          bindLiterals(sql('worker/external_claim', { shardId: shard.id, kind: KIND, claimLimit: K, leaseToken: shard.token, routed: false, payloads: false })),
        ),
      );
      ms.claim += claimMs;
      claimEach.push(claimMs);
      ms.unhold += (await timed(() => c.query(bindLiterals(sql('worker/external_unhold', { shardId: shard.id, kind: KIND })))))[1];
      await c.query('COMMIT');
      claimed.push({ shard, bizIds: claim.rows[0]!.biz_ids, applied: [] });
    }
    for (const s of claimed) {
      const [closed, closeMs] = await timed(() => close(s.bizIds));
      ms.close += closeMs;
      s.applied = closed.rows.map((r) => String(r.id));
    }
    for (const s of claimed) {
      const inputs = {
        shardId: s.shard.id,
        leaseToken: s.shard.token,
        applied: s.applied,
        failedIds: [],
        failedErrors: [],
        failedPermanent: [],
        maxAttempts: 5,
        backoffMs: 1000,
        batchRetryMs: null,
        batchError: null,
        ran: null,
      };
      ms.record += (await timed(() => c.query(sql('worker/external_record', inputs))))[1];
    }
    await checkDrained('the external path');
    const center = perTimeout(ms.lock + ms.claim + ms.unhold + ms.record);
    const external = center + perTimeout(ms.close);

    // The two-phase run (src/worker/two-phase.ts): per shard, one center transaction locks the rows
    // (external_two_phase_claim.sql), the business close, then external_two_phase_move.sql moves
    // them to the history, applied or skipped as the close said; committed here, where the product
    // PREPAREs it and commits it after the business commit (per shard, not per timeout).
    await seed();
    const two = { claim: 0, record: 0, close: 0 };
    for (const shard of await shards()) {
      await c.query('BEGIN');
      const [claimed, claimMs] = await timed(() =>
        c.query<{ biz_ids: string; ctids: string }>({
          ...sql('worker/external_two_phase_claim', { shardId: shard.id, kind: KIND, claimLimit: K, leaseToken: shard.token, routed: false, payloads: false }),
          types: AS_TEXT,
        }),
      );
      two.claim += claimMs;
      const { biz_ids: bizIds, ctids } = claimed.rows[0]!;
      const [closed, closeMs] = await timed(() => close(bizIds));
      two.close += closeMs;
      const applied = closed.rows.map((r) => String(r.id));
      two.record += (await timed(() => c.query(sql('worker/external_two_phase_move', { shardId: shard.id, leaseToken: shard.token, ctids, applied }))))[1];
      await c.query('COMMIT');
    }
    await checkDrained('the two-phase run');
    const twoCenter = perTimeout(two.claim + two.record);
    const twoAll = twoCenter + perTimeout(two.close);

    await seed();
    let same = 0;
    for (const shard of await shards()) {
      await c.query('BEGIN');
      same += (
        await timed(() =>
          c.query({ text: batch.sql, values: statementValues('worker/claim', { shardId: shard.id, kind: KIND, claimLimit: K, batch: true }), types: AS_TEXT }),
        )
      )[1];
      await c.query('COMMIT');
    }
    await checkDrained('the same-database claim');
    const sameUs = perTimeout(same);
    console.log(
      `round ${round}: external claim ${f(perTimeout(ms.claim))} µs/timeout (shard by shard ${claimEach.map((m) => m.toFixed(1)).join(' ')} ms), ` +
        `claim lock ${f(perTimeout(ms.lock))}, give-back ${f(perTimeout(ms.unhold))}, record ${f(perTimeout(ms.record))}: center ${f(center)}; ` +
        `business close ${f(perTimeout(ms.close))}; external in all ${f(external)} µs/timeout. ` +
        `Same-database claim (close inside) ${f(sameUs)} µs/timeout. Same-database / external ${(sameUs / external).toFixed(2)}`,
    );
    console.log(
      `round ${round}: two-phase claim ${f(perTimeout(two.claim))} µs/timeout, move ${f(perTimeout(two.record))}: center ${f(twoCenter)}; ` +
        `business close ${f(perTimeout(two.close))}; two-phase in all ${f(twoAll)} µs/timeout. Same-database / two-phase ${(sameUs / twoAll).toFixed(2)}`,
    );
  }
  c.release();
  await pool.end();
} finally {
  await stopAllServers();
}
