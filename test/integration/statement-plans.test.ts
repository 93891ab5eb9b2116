// The plans of the external path's two hot statements, checked by their shape, not their time:
// both went quadratic or whole-backlog once without any test noticing (bench:external at 0.12x).
//   external_record: its writes reach the shard's rows through an index, never by comparing
//     every row with every other (a nested loop over two 1-row estimates: 1,000 x 1,000).
//   external_claim (routed): walks its target's due index in due order and stops at its limit,
//     never reads and sorts the kind's whole backlog (sql/0016), nor reads other targets' rows
//     (sql/0020); its one sort is its own claimed rows into id order. Its newest-first form (every
//     other shard of a flood) walks the same index backward, past none of the rows another holds.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compose, statement } from '../../src/db/queries.js';
import { bindLiterals } from '../../src/worker/bind-literals.js';
import { NEWEST_FIRST } from '../../src/worker/sql-handler.js';
import { writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
const SHARD = 1000;

describe('plans of the external path', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let scanId: number;

  beforeAll(async () => {
    db = await createTestDatabase('plans');
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const config = writeConfig({
      businessDatabases: Object.fromEntries(['b0', 'b1', 'b2'].map((b) => [b, { url: db.url }])),
      kinds: {
        [KIND]: {
          handler: {
            type: 'sql',
            sql: 'UPDATE orders SET status = $$closed$$ WHERE id = ANY($1) RETURNING id',
            route: { by: 'modulo', databases: ['b0', 'b1', 'b2'] },
          },
        },
      },
    });
    const migrated = await runCli(['migrate', '--config', config], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL });
    expect(migrated.code, migrated.stderr).toBe(0);
    // 30,000 due, analyzed while none is dispatched (as in a burst: the statistics lag the state).
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() - interval '1 minute' + g * interval '1 millisecond' FROM generate_series(1, 30000) g`,
      [KIND],
    );
    await pool.query('VACUUM ANALYZE timeout_center.timeouts');
    scanId = Number((await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`)).rows[0].id);
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const shard = async (seq: number, target: string) =>
    (
      await pool.query<{ id: string; lease_token: string }>(
        `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, state, lease_token, claim_limit, target)
         VALUES ($1, $2, $3, $4, 'running', gen_random_uuid(), $4, $5) RETURNING id, lease_token`,
        [scanId, KIND, seq, SHARD, target],
      )
    ).rows[0]!;

  const explain = async (text: string, values: unknown[]): Promise<string> => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
      return JSON.stringify(rows[0]['QUERY PLAN']);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  };

  it('external_claim walks the due index for its target and stops at its limit', async () => {
    const s = await shard(1, 'b1');
    const plan = await explain(statement('worker/external_claim'), [Number(s.id), KIND, SHARD, s.lease_token, true, false]);
    expect(plan).toContain('"Index Name":"timeouts_due_by_target"');
    expect(plan).not.toContain('"Node Type":"Seq Scan"');
    // The one sort allowed: the shard's own claimed rows into id order, for the arrays it returns
    // (at most its limit); never the kind's backlog before the limit.
    const sorts: { rows: number; input: string }[] = [];
    const walk = (node: { 'Node Type': string; 'Actual Rows'?: number; 'CTE Name'?: string; Plans?: unknown[] }) => {
      if (node['Node Type'] === 'Sort') {
        const child = (node.Plans?.[0] ?? {}) as { 'Node Type'?: string; 'CTE Name'?: string };
        sorts.push({ rows: node['Actual Rows'] ?? -1, input: `${child['Node Type']} ${child['CTE Name'] ?? ''}`.trim() });
      }
      for (const p of node.Plans ?? []) walk(p as typeof node);
    };
    walk((JSON.parse(plan) as [{ Plan: Parameters<typeof walk>[0] }])[0].Plan);
    expect(sorts).toEqual([{ rows: SHARD, input: 'CTE Scan rows' }]);
    // Its own target's rows only (sql/0020): no row of b0 or b2 read and thrown away.
    expect(plan).toMatch(/"Index Name":"timeouts_due_by_target"[^{}]*"Rows Removed by Filter":0[,}]/);
  });

  it("external_claim's newest-first form (every other shard of a flood) walks the due index from the other end, past none of the rows another shard holds", async () => {
    // a shard of the flood mapped ahead holds the oldest 1,000 of b2's rows (claimed for real)
    const oldest = await shard(3, 'b2');
    await pool.query(`UPDATE timeout_center.shards SET not_before = now() WHERE id = $1`, [oldest.id]);
    await pool.query(bindLiterals(statement('worker/external_claim'), [Number(oldest.id), KIND, SHARD, oldest.lease_token, true, false]));
    const held = (await pool.query<{ ids: string[] }>(`SELECT held_ids::text[] AS ids FROM timeout_center.shards WHERE id = $1`, [oldest.id])).rows[0]!.ids;
    expect(held).toHaveLength(SHARD);
    const s = await shard(4, 'b2');
    await pool.query(`UPDATE timeout_center.shards SET not_before = now() WHERE id = $1`, [s.id]);
    const newest = compose('worker/external_claim', { claimOrder: NEWEST_FIRST });
    const plan = await explain(newest, [Number(s.id), KIND, SHARD, s.lease_token, true, false]);
    expect(plan).toContain('"Scan Direction":"Backward"');
    expect(plan).toMatch(/"Index Name":"timeouts_due_by_target"[^{}]*"Rows Removed by Filter":0[,}]/);
    // what it takes: b2's newest due rows, none of the oldest shard's
    const { rows } = await pool.query<{ biz_ids: string[] }>({ text: newest, values: [Number(s.id), KIND, SHARD, s.lease_token, true, false] });
    const taken = rows[0]!.biz_ids;
    expect(taken).toHaveLength(SHARD);
    const heldBizIds = (await pool.query<{ biz_id: string }>(`SELECT biz_id FROM timeout_center.timeouts WHERE id = ANY ($1::bigint[])`, [held])).rows.map(
      (r) => r.biz_id,
    );
    expect(taken.filter((bizId) => heldBizIds.includes(bizId))).toEqual([]);
    const maxDue = await pool.query<{ max: string }>(
      `SELECT biz_id AS max FROM timeout_center.timeouts WHERE kind = $1 AND target = 'b2' AND state = 'pending' ORDER BY id DESC LIMIT 1`,
      [KIND],
    );
    expect(taken).toContain(maxDue.rows[0]!.max);
  });

  it("external_record reaches the shard's rows through an index, not row by row against each other", async () => {
    const s = await shard(2, 'b0');
    const { rows } = await pool.query<{ biz_id: string }>(
      `UPDATE timeout_center.timeouts SET state = 'dispatched', shard_id = $1, attempts = 1
        WHERE id IN (SELECT id FROM timeout_center.timeouts WHERE state = 'pending' ORDER BY id LIMIT $2) RETURNING biz_id`,
      [Number(s.id), SHARD],
    );
    const ids = rows.map((r) => r.biz_id);
    // Every row recorded (most applied, one failed), then the whole batch failing: both write paths.
    for (const batchRetryMs of [null, 1000]) {
      const plan = await explain(statement('worker/external_record'), [
        Number(s.id),
        s.lease_token,
        ids.slice(1),
        ids.slice(0, 1),
        ['boom'],
        [false],
        5,
        1000,
        batchRetryMs,
        batchRetryMs === null ? null : 'target down',
        ids,
      ]);
      const removed = [...plan.matchAll(/"Rows Removed by Join Filter":(\d+)/g)].map((m) => Number(m[1]));
      expect(Math.max(0, ...removed), 'rows compared in a nested loop').toBeLessThan(SHARD * 10);
      expect(plan).toMatch(/"Actual Rows":1,"Actual Loops":1/); // the shard row updated with its counts
    }
  });
});
