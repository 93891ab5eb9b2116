// The claim of a two-phase external run (external_claim_move.sql, external_two_phase_overlap.sql)
// and what the commit-first claim does after such a run died (external_claim.sql), statement by
// statement on a real PostgreSQL, in the orders the soak and test/faults/two-phase.test.ts met:
//   1. A commit-first claim that committed after the move's snapshot holds some of the rows the
//      move took: the overlap check counts them, though the move deleted them from the timeouts
//      table in its own transaction (the give-back of the commit-first path, external_unhold.sql,
//      names rows through that table and saw none: the soak's "order closed, timeout skipped").
//   2. A split's half (rows pinned to it, dispatched) gets no two-phase claim: it runs commit
//      first, which takes its rows (before, the move claimed fresh rows and left them stranded).
//   3. The first committed claim of a shard counts as its first attempt: a two-phase run that died
//      before its PREPARE (attempt 1, nothing committed) does not use up the kind's attempts.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../src/db/queries.js';
import { bindLiterals } from '../../src/worker/bind-literals.js';
import { writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';

describe('the two-phase claim', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let scanId: number;

  beforeAll(async () => {
    db = await createTestDatabase('two-phase-claim');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    const config = writeConfig({
      businessDatabases: { b0: { url: db.url } },
      kinds: { [KIND]: { handler: { type: 'sql', sql: 'UPDATE orders SET status = $$closed$$ WHERE id = ANY($1) RETURNING id', database: 'b0' } } },
    });
    const migrated = await runCli(['migrate', '--config', config], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL });
    expect(migrated.code, migrated.stderr).toBe(0);
    scanId = Number((await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`)).rows[0].id);
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  let seq = 0;
  let next = 0;
  /** n due timeouts of their own; returns their ids. */
  const due = async (n: number) =>
    (
      await pool.query<{ id: string }>(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() - interval '1 minute' FROM generate_series($2::int, $3::int) g RETURNING id`,
        [KIND, next + 1, (next += n)],
      )
    ).rows.map((r) => r.id);
  const shard = async (limit: number, attempts = 1) => {
    const { rows } = await pool.query<{ id: string; lease_token: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, state, lease_token, claim_limit, target, attempts)
       VALUES ($1, $2, $3, $4, 'running', gen_random_uuid(), $4, 'b0', $5) RETURNING id, lease_token`,
      [scanId, KIND, (seq += 1), limit, attempts],
    );
    return { id: Number(rows[0]!.id), token: rows[0]!.lease_token };
  };
  const move = (s: { id: number; token: string }, limit: number) =>
    bindLiterals(sql('worker/external_claim_move', { shardId: s.id, kind: KIND, claimLimit: limit, leaseToken: s.token, routed: false, payloads: false }));
  const clearDue = () => pool.query(`DELETE FROM timeout_center.timeouts WHERE state = 'pending'`);

  it('1. counts the moved rows a commit-first claim committed a hold on meanwhile, though the move deleted them', async () => {
    await clearDue();
    const ids = await due(10);
    const twoPhase = await shard(10);
    const holder = await shard(10);
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const moved = (await c.query<{ ids: string[] }>(move(twoPhase, 10))).rows[0]!.ids.map(String);
      expect(moved.sort()).toEqual([...ids].sort());
      // A commit-first claim that read the rows before the move locked them, and committed its
      // hold after the move's snapshot (its row locks end at its commit).
      await pool.query(`UPDATE timeout_center.shards SET held_ids = $2::bigint[], claimed_at = now() WHERE id = $1`, [holder.id, ids.slice(0, 3)]);
      const overlap = (await c.query<{ overlap: number }>(sql('worker/external_two_phase_overlap', { shardId: twoPhase.id, kind: KIND }))).rows[0]!.overlap;
      expect(overlap).toBe(3);
      // The commit-first give-back names rows through the timeouts table, from which this
      // transaction deleted them: it sees none (why the two-phase run cannot use it).
      const givenBack = (await c.query<{ given_back: string[] }>(sql('worker/external_unhold', { shardId: twoPhase.id, kind: KIND }))).rows[0]!.given_back;
      expect(givenBack).toEqual([]);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
    await pool.query(`UPDATE timeout_center.shards SET state = 'done', held_ids = NULL WHERE id = $1`, [holder.id]);
  });

  it('1b. counts none when no other shard holds the moved rows', async () => {
    await clearDue();
    await due(5);
    const twoPhase = await shard(5);
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      expect((await c.query<{ ids: string[] }>(move(twoPhase, 5))).rows[0]!.ids).toHaveLength(5);
      expect((await c.query<{ overlap: number }>(sql('worker/external_two_phase_overlap', { shardId: twoPhase.id, kind: KIND }))).rows[0]!.overlap).toBe(0);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
  });

  it('2. a split half, its rows pinned to it, gets no two-phase claim; the commit-first claim takes its rows', async () => {
    await clearDue();
    const pinnedIds = await due(4);
    await due(6); // fresh rows a two-phase claim could have taken instead
    const half = await shard(4, 1);
    await pool.query(`UPDATE timeout_center.timeouts SET state = 'dispatched', shard_id = $1 WHERE id = ANY ($2::bigint[])`, [half.id, pinnedIds]);
    expect((await pool.query(move(half, 4))).rowCount).toBe(0);
    const claim = bindLiterals(
      sql('worker/external_claim', { shardId: half.id, kind: KIND, claimLimit: 4, leaseToken: half.token, routed: false, payloads: false }),
    );
    const taken = (await pool.query<{ biz_ids: string[] }>(claim)).rows[0]!.biz_ids;
    const pinnedBiz = (await pool.query<{ biz_id: string }>(`SELECT biz_id FROM timeout_center.timeouts WHERE id = ANY ($1::bigint[])`, [pinnedIds])).rows.map(
      (r) => r.biz_id,
    );
    expect([...taken].sort()).toEqual(pinnedBiz.sort());
    await pool.query(`UPDATE timeout_center.timeouts SET state = 'pending', shard_id = NULL WHERE shard_id = $1`, [half.id]);
    await pool.query(`UPDATE timeout_center.shards SET state = 'done' WHERE id = $1`, [half.id]);
  });

  it("3. the shard's first committed claim counts as attempt 1, after runs that left nothing committed", async () => {
    await clearDue();
    await due(3);
    // leased a second time after a two-phase run died before its PREPARE (claimed_at NULL)
    const rerun = await shard(3, 2);
    const claim = bindLiterals(
      sql('worker/external_claim', { shardId: rerun.id, kind: KIND, claimLimit: 3, leaseToken: rerun.token, routed: false, payloads: false }),
    );
    expect((await pool.query<{ biz_ids: string[] }>(claim)).rows[0]!.biz_ids).toHaveLength(3);
    expect((await pool.query<{ attempts: number }>(`SELECT attempts FROM timeout_center.shards WHERE id = $1`, [rerun.id])).rows[0]!.attempts).toBe(1);
    // a later claim of the same shard (a re-run taking its held rows back) leaves attempts alone
    await pool.query(`UPDATE timeout_center.shards SET attempts = 2 WHERE id = $1`, [rerun.id]);
    await pool.query(claim);
    expect((await pool.query<{ attempts: number }>(`SELECT attempts FROM timeout_center.shards WHERE id = $1`, [rerun.id])).rows[0]!.attempts).toBe(2);
  });
});
