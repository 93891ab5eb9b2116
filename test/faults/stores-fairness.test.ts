// Fair across stores (issue 31): one `run` process with the defaults (worker concurrency 4) serves
// three stores, and a burst due at one instant in each, two shards' worth per store. No store's
// shards may wait behind another's: per store, the median lateness of the burst stays within 2x of
// the other stores' (measured per round, in the same run). The center and the three stores are
// databases of one PostgreSQL server of the test's own, started with track_commit_timestamp so that
// lateness is taken at commit (the commit time of the transaction that moved each row to
// done_timeouts, minus its due time): what is measured is how the worker shares its slots.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { startPostgres, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { TEST_REDIS_URL, testKeyPrefix } from '../helpers/services.js';
import { report, sleep, waitUntil } from './harness.js';

const KIND = 'order.unpaid';
const STORES = ['fair_0', 'fair_1', 'fair_2'] as const;
/** Rows per store per burst: two shards of the default 500 (the map's first shard keeps the
 *  configured size, and 1,000 uncovered rows make one more of 500). */
const PER_STORE = 1000;
const ROUNDS = 6;

let server: PostgresServer;
let pools: pg.Pool[] = [];
let configPath: string;
let env: Record<string, string | undefined>;

beforeAll(async () => {
  server = await startPostgres();
  const admin = new pg.Client({ connectionString: server.url() });
  await admin.connect();
  await admin.query('ALTER SYSTEM SET track_commit_timestamp = on');
  for (const name of ['center', ...STORES]) await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  await server.restart('fast');
  pools = STORES.map((name) => new pg.Pool({ connectionString: server.url(name), max: 2 }));
  await Promise.all(pools.map((p) => createOrdersSchema(p)));
  // Defaults everywhere but the kind's store layout and the test's own Redis prefix.
  configPath = writeConfig({
    redisKeyPrefix: testKeyPrefix('stores-fairness'),
    kinds: {
      [KIND]: { store: 'beside', handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: [...STORES] } } },
    },
    businessDatabases: Object.fromEntries(STORES.map((name) => [name, { url: server.url(name) }])),
  });
  env = { DATABASE_URL: server.url('center'), REDIS_URL: TEST_REDIS_URL, TC_FAILPOINTS: undefined };
  const migrated = await runCli(['migrate', '--config', configPath], env, 60_000);
  expect(migrated.code, migrated.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  const leaked = await killAll();
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
  await stopAllServers();
  expect(leaked).toEqual([]);
}, 60_000);

/** A burst of PER_STORE orders per store, all due at one instant dueInMs from now. */
async function burst(round: number, dueInMs: number): Promise<void> {
  const from = round * PER_STORE * STORES.length + 1;
  const to = from + PER_STORE * STORES.length - 1;
  // One due instant for every store, taken from one clock (the stores share the server here).
  const { rows } = await pools[0]!.query<{ due: Date }>(`SELECT now() + $1 * interval '1 millisecond' AS due`, [dueInMs]);
  await Promise.all(
    STORES.map((_, i) =>
      pools[i]!.query(
        `WITH o AS (INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::bigint, $2::bigint) g WHERE g % 3 = $3 RETURNING id)
         INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $4, id::text, $5 FROM o`,
        [from, to, i, KIND, rows[0]!.due],
      ),
    ),
  );
}

/** Per store: the median and worst lateness of the round's rows at commit (ms). */
async function lateness(round: number): Promise<{ p50: number; max: number; claimP50: number; shards: number; firstClaim: Date; firstCommit: Date }[]> {
  const from = round * PER_STORE * STORES.length + 1;
  const to = from + PER_STORE * STORES.length - 1;
  return Promise.all(
    pools.map(async (p) => {
      const { rows } = await p.query<{ p50: number; max: number; claim_p50: number; shards: number; first_claim: Date; first_commit: Date }>(
        `SELECT (percentile_cont(0.5) WITHIN GROUP (ORDER BY l.ms))::float8 AS p50, max(l.ms)::float8 AS max,
                min(d.finished_at) AS first_claim, min(pg_xact_commit_timestamp(d.xmin)) AS first_commit,
                (percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM d.finished_at - d.due_at) * 1000))::float8 AS claim_p50,
                count(DISTINCT d.shard_id)::int AS shards
           FROM timeout_center.done_timeouts d
          CROSS JOIN LATERAL (SELECT extract(epoch FROM pg_xact_commit_timestamp(d.xmin) - d.due_at) * 1000 AS ms) l
          WHERE d.biz_id::bigint BETWEEN $1 AND $2`,
        [from, to],
      );
      const r = rows[0]!;
      const ms = (x: number) => Math.round(x * 10) / 10;
      return { p50: ms(r.p50), max: ms(r.max), claimP50: ms(r.claim_p50), shards: r.shards, firstClaim: r.first_claim, firstCommit: r.first_commit };
    }),
  );
}

describe('one worker serving three stores', () => {
  it('a burst in each store with the defaults: per-store median lateness within 2x of each other', async () => {
    const run = spawnCli('run', ['run', '--config', configPath], env);
    try {
      await measure(run);
    } finally {
      await run.stop(15_000);
    }
  }, 120_000);
});

/** Bursts ROUNDS times and checks the per-store medians (see the test's title). */
async function measure(run: CliProcess): Promise<void> {
  await run.waitForMsg('worker started', 30_000);
  await Promise.all(STORES.map((s) => run.waitForMsg(`worker serves store ${s}`, 30_000)));
  // Per round and store: lateness at commit (p50, max), the median of finished_at - due_at
  // (stamped when the claim statement started, until lateness at commit lands there too), and
  // the shards that closed the store's rows.
  // waited: stores whose first shard began its claim only after a shard of another store had
  // committed (it waited behind that store's shards for a slot).
  const rounds: { p50: number[]; max: number[]; claimP50: number[]; shards: number[]; waited: number; ratio: number }[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    await burst(round, 2000);
    await waitUntil(
      `round ${round}: every store drained`,
      async () => {
        const left = await Promise.all(
          pools.map(async (p) =>
            Number((await p.query(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state IN ('pending', 'dispatched')`)).rows[0].n),
          ),
        );
        return left.every((n) => n === 0);
      },
      30_000,
    );
    const per = await lateness(round);
    const p50 = per.map((s) => s.p50);
    const firstCommit = Math.min(...per.map((s) => s.firstCommit.getTime()));
    const waited = per.filter((s) => s.firstClaim.getTime() > firstCommit).length;
    rounds.push({
      p50,
      max: per.map((s) => s.max),
      claimP50: per.map((s) => s.claimP50),
      shards: per.map((s) => s.shards),
      waited,
      ratio: Math.round((Math.max(...p50) / Math.max(1, Math.min(...p50))) * 100) / 100,
    });
    await sleep(500);
  }
  report('3 stores, one run process with the defaults, 2 shards per store per burst', { perStore: PER_STORE, rounds });
  // The first round also opens sessions and plans: the median round says how the slots are shared.
  const ratios = rounds.map((r) => r.ratio).sort((a, b) => a - b);
  const median = ratios[Math.floor(ratios.length / 2)]!;
  expect(median, `per-store p50 ratio by round: ${JSON.stringify(rounds.map((r) => r.ratio))}`).toBeLessThanOrEqual(2);
}
