// The map's side of the rate limit per business database, statement by statement (the real
// plan_shards.sql through planScan, on a real database; no processes): a limited database gets
// whole shards of a tenth of a second's worth within its budget and one second's worth in flight,
// over all kinds together; the kinds share it; a paused kind's queued shards do not hold its room;
// unlimited databases and same-database kinds are untouched; a budget missing means nothing.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { planScan, type PlannedScan } from '../../src/coordinator/map.js';
import { syncKinds } from '../../src/db/kinds.js';
import { createPool } from '../../src/db/pool.js';
import { migrate } from '../../src/db/migrate.js';
import { syncRoutes } from '../../src/db/routes.js';
import { syncTargets } from '../../src/db/targets.js';
import { createLogger } from '../../src/observability/logger.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';
import { tearDown } from '../helpers/teardown.js';

const SQL = "UPDATE orders SET status = 'closed' WHERE id = ANY($1) RETURNING id";
/** Eight unlimited business databases behind one route (the last describe). */
const WIDE = ['w0', 'w1', 'w2', 'w3', 'w4', 'w5', 'w6', 'w7'];
const EPOCH = 1;
let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase('target_plan');
  // The processes' pool (bigint as number: the fence compares the epoch).
  pool = createPool({ connectionString: db.url, max: 3, applicationName: 'target-plan test', logger: createLogger('silent') });
  await migrate(pool, createLogger('silent'));
  const config = parseConfig({
    businessDatabases: {
      a: { url: 'postgres://a', rateLimit: 1000 },
      b: { url: 'postgres://b' },
      ...Object.fromEntries(WIDE.map((d) => [d, { url: `postgres://${d}` }])),
    },
    kinds: {
      'k.a1': { handler: { type: 'sql', sql: SQL, database: 'a' } },
      'k.a2': { handler: { type: 'sql', sql: SQL, database: 'a' } },
      'k.routed': { handler: { type: 'sql', sql: SQL, route: { by: 'modulo', databases: ['a', 'b'] } } },
      'k.b': { handler: { type: 'sql', sql: SQL, database: 'b' } },
      'k.same': { handler: { type: 'sql', sql: SQL } },
      'k.wide': { handler: { type: 'sql', sql: SQL, route: { by: 'modulo', databases: WIDE } } },
    },
  });
  await syncKinds(pool, config.kinds);
  await syncRoutes(pool, config.kinds);
  await syncTargets(pool, config.businessDatabases);
  await pool.query(`UPDATE timeout_center.coordinator_lease SET epoch = $1, holder = 'test' WHERE id = 1`, [EPOCH]);
  // A live worker serves every kind (a kind no live worker serves gets one shard at most).
  await pool.query(`INSERT INTO timeout_center.workers (worker_id, host, pid, kinds) VALUES ('test-worker', 'test', 1, $1)`, [Object.keys(config.kinds)]);
  for (const kind of KINDS) {
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() - interval '1 s' FROM generate_series(1, 3000) g`, [
      kind,
    ]);
  }
});

afterAll(() => tearDown({ pool, db }));

const KINDS = ['k.a1', 'k.a2', 'k.routed', 'k.b', 'k.same'];

function plan(targetBudget: Record<string, number>): Promise<PlannedScan | undefined> {
  return planScan(pool, EPOCH, {
    coordinatorId: 'test',
    cutoff: new Date(),
    kinds: KINDS,
    maxShards: 1000,
    maxRows: 50_000,
    credit: {},
    rateBudget: {},
    targetBudget,
    goneAfterMs: 3000,
  });
}

async function newShards(scan: PlannedScan | undefined): Promise<{ kind: string; target: string | null; claim_limit: number }[]> {
  if (!scan) return [];
  const { rows } = await pool.query(`SELECT kind, target, claim_limit FROM timeout_center.shards WHERE scan_id = $1 ORDER BY id`, [scan.scanId]);
  return rows;
}

const rowsTo = (shards: { target: string | null; claim_limit: number }[], target: string | null) =>
  shards.filter((s) => s.target === target).reduce((n, s) => n + s.claim_limit, 0);

describe('plan_shards under a rate limit per business database', () => {
  it('a budget of 300: whole shards of 100 against the limited database, over its kinds; the others untouched', async () => {
    const shards = await newShards(await plan({ a: 300 }));
    const toA = shards.filter((s) => s.target === 'a');
    expect(rowsTo(shards, 'a')).toBe(300);
    expect(toA.every((s) => s.claim_limit === 100)).toBe(true);
    expect(new Set(toA.map((s) => s.kind)).size, 'three shards over three kinds sharing the database').toBeGreaterThanOrEqual(2);
    // Unlimited database b and the same-database kind: every due row, in shards sized to the
    // backlog (plan_shards.sql: the first 500, then a quarter of the 3,000 uncovered each, 750;
    // the count saw the last due row, so the last shard halves, here to the kind's 500, and the
    // one farthest from the end holds what is left: 500, 500, 750, 750, 500 in turn order), in
    // the center's database as in business database b (issue 32: up to 5,000 rows there). The
    // routed kind's count per target never says it saw the last row: a quarter of its 1,500 is
    // below its 500, so 500 each.
    expect(
      rowsTo(
        shards.filter((s) => s.kind === 'k.b'),
        'b',
      ),
    ).toBe(3000);
    expect(
      rowsTo(
        shards.filter((s) => s.kind === 'k.routed'),
        'b',
      ),
    ).toBe(1500);
    expect(rowsTo(shards, null)).toBe(3000);
    for (const kind of ['k.b', 'k.routed'])
      expect(
        shards
          .filter((s) => s.target === 'b' && s.kind === kind)
          .map((s) => s.claim_limit)
          .sort((x, y) => x - y),
        kind,
      ).toEqual(kind === 'k.b' ? [500, 500, 500, 750, 750] : [500, 500, 500]);
    expect(
      shards
        .filter((s) => s.target === null)
        .map((s) => s.claim_limit)
        .sort((x, y) => x - y),
    ).toEqual([500, 500, 500, 750, 750]);
  });

  it('never more than one second worth in flight against it, whatever the budget', async () => {
    // 300 in flight against a: a budget of 5,000 gives 700.
    expect(rowsTo(await newShards(await plan({ a: 5000 })), 'a')).toBe(700);
    // 1,000 in flight: nothing more, however large the budget.
    expect(rowsTo(await newShards(await plan({ a: 5000 })), 'a')).toBe(0);
  });

  it("a paused kind's queued shards do not hold the database's room; nothing without a budget", async () => {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT coalesce(sum(claim_limit), 0)::int AS n FROM timeout_center.shards WHERE kind = 'k.a1' AND target = 'a' AND state = 'queued'`,
    );
    const held = rows[0]!.n;
    expect(held).toBeGreaterThan(0);
    await pool.query(`UPDATE timeout_center.kinds SET paused = true WHERE kind = 'k.a1'`);
    expect(rowsTo(await newShards(await plan({})), 'a'), 'no budget: nothing').toBe(0);
    const shards = await newShards(await plan({ a: 5000 }));
    expect(rowsTo(shards, 'a')).toBe(held);
    expect(shards.some((s) => s.kind === 'k.a1')).toBe(false);
    // Lifting the limit: the kinds of a get their full shard size again.
    await pool.query(`UPDATE timeout_center.targets SET rate_limit = NULL WHERE target = 'a'`);
    const free = await newShards(await plan({}));
    expect(free.filter((s) => s.target === 'a').some((s) => s.claim_limit === 500)).toBe(true);
  });
});

describe('plan_shards for a kind routed over many business databases', () => {
  it("sizes its shards on the kind's uncovered rows over all its targets, not on each target's", async () => {
    // 16,000 due over eight databases: 2,000 each. A quarter of the kind's 16,000 is 4,000, so
    // each database gets one shard of its 2,000, except the first, whose first shard is the
    // kind's small first one (500: nothing of the kind in flight yet), and one of the 1,500 left.
    // Sized on one database's 2,000 (a quarter: 500), each got four shards of 500, and sixteen
    // databases paid each shard's fixed costs for a sixteenth of a flood (issue 32).
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'k.wide', g::text, now() - interval '1 s' FROM generate_series(1, 16000) g`,
    );
    const scan = await planScan(pool, EPOCH, {
      coordinatorId: 'test',
      cutoff: new Date(),
      kinds: ['k.wide'],
      maxShards: 1000,
      maxRows: 50_000,
      credit: {},
      rateBudget: {},
      targetBudget: {},
      goneAfterMs: 3000,
    });
    const shards = await newShards(scan);
    for (const d of WIDE) {
      expect(rowsTo(shards, d), d).toBe(2000);
      expect(
        shards
          .filter((s) => s.target === d)
          .map((s) => s.claim_limit)
          .sort((x, y) => x - y),
        d,
      ).toEqual(d === 'w0' ? [500, 1500] : [2000]);
    }
  });
});
