// The claim and move of a two-phase external run (external_two_phase_claim.sql,
// external_two_phase_overlap.sql, external_two_phase_move.sql) and what the commit-first claim
// does after such a run died (external_claim.sql), statement by statement on a real PostgreSQL, in
// the orders the soak and test/faults/two-phase.test.ts met:
//   1. A commit-first claim that committed after the two-phase claim's snapshot holds some of the
//      rows that claim locked: the overlap check counts them (the soak's "order closed, timeout
//      skipped" when it did not).
//   2. A split's half (rows pinned to it, dispatched) gets no two-phase claim: it runs commit
//      first, which takes its rows (before, the move claimed fresh rows and left them stranded).
//   3. The first committed claim of a shard counts as its first attempt: a two-phase run that died
//      before its PREPARE (attempt 1, nothing committed) does not use up the kind's attempts.
//   4. The move writes each claimed row once, to the history, applied or skipped as the business
//      database said; until then the claim's lock keeps every row where the claim found it (a
//      payer's UPDATE waits), so the move reaches them by the ctids the claim returned.
//   5. A ctid list that names a row the claim did not lock moves fewer rows than claimed: the
//      count the run compares (it backs out on a difference) shows it.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../src/db/queries.js';
import { AS_TEXT as AS_TEXT_ROWS, parseTextArray } from '../../src/db/pg-text.js';
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
  const claimTwoPhase = (s: { id: number; token: string }, limit: number) =>
    bindLiterals(sql('worker/external_two_phase_claim', { shardId: s.id, kind: KIND, claimLimit: limit, leaseToken: s.token, routed: false, payloads: false }));
  const bizOf = async (ids: string[]) =>
    (await pool.query<{ biz_id: string }>(`SELECT biz_id FROM timeout_center.timeouts WHERE id = ANY ($1::bigint[]) ORDER BY id`, [ids])).rows.map(
      (r) => r.biz_id,
    );
  const clearDue = () => pool.query(`DELETE FROM timeout_center.timeouts WHERE state = 'pending'`);

  it('1. counts the claimed rows a commit-first claim committed a hold on meanwhile', async () => {
    await clearDue();
    const ids = await due(10);
    const twoPhase = await shard(10);
    const holder = await shard(10);
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const claimed = (await c.query<{ biz_ids: string[] }>(claimTwoPhase(twoPhase, 10))).rows[0]!.biz_ids;
      expect([...claimed].sort()).toEqual((await bizOf(ids)).sort());
      // A commit-first claim that read the rows before the two-phase claim locked them, and
      // committed its hold after that claim's snapshot (its row locks end at its commit).
      await pool.query(`UPDATE timeout_center.shards SET held_ids = $2::bigint[], claimed_at = now() WHERE id = $1`, [holder.id, ids.slice(0, 3)]);
      const overlap = (await c.query<{ overlap: number }>(sql('worker/external_two_phase_overlap', { shardId: twoPhase.id, kind: KIND }))).rows[0]!.overlap;
      expect(overlap).toBe(3);
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
      expect((await c.query<{ biz_ids: string[] }>(claimTwoPhase(twoPhase, 5))).rows[0]!.biz_ids).toHaveLength(5);
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
    expect((await pool.query(claimTwoPhase(half, 4))).rowCount).toBe(0);
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

  it("4. the move writes each claimed row once, applied or skipped; the claim's lock keeps the rows where it found them", async () => {
    await clearDue();
    const ids = await due(6);
    const s = await shard(6);
    const c = await pool.connect();
    const payer = await pool.connect();
    try {
      await c.query('BEGIN');
      const { biz_ids: bizIds, ctids } = (await c.query<{ biz_ids: string[]; ctids: string }>({ text: claimTwoPhase(s, 6), types: AS_TEXT_ROWS })).rows[0]!;
      const claimed = parseTextArray(bizIds as unknown as string);
      expect(claimed).toHaveLength(6);
      // nothing written by the claim: the rows are still pending in the hot table
      expect((await c.query(`SELECT 1 FROM timeout_center.timeouts WHERE id = ANY ($1::bigint[]) AND state = 'pending'`, [ids])).rowCount).toBe(6);
      // a payer's UPDATE of a claimed row waits for the run (here: gives up after 200 ms)
      await payer.query('BEGIN');
      await payer.query('SET LOCAL lock_timeout = 200');
      await expect(payer.query(`UPDATE timeout_center.timeouts SET state = 'cancelled' WHERE id = $1`, [ids[0]])).rejects.toMatchObject({ code: '55P03' });
      await payer.query('ROLLBACK');
      const applied = claimed.slice(0, 4);
      const moved = (
        await c.query<{ moved: number; done: number; skipped: number }>(
          sql('worker/external_two_phase_move', { shardId: s.id, leaseToken: s.token, ctids, applied }),
        )
      ).rows[0]!;
      expect(moved).toMatchObject({ moved: 6, done: 4, skipped: 2 });
      await c.query('COMMIT');
    } finally {
      await c.query('ROLLBACK').catch(() => {});
      c.release();
      payer.release();
    }
    expect((await pool.query(`SELECT 1 FROM timeout_center.timeouts WHERE id = ANY ($1::bigint[])`, [ids])).rowCount).toBe(0);
    const history = (
      await pool.query<{ biz_id: string; result: string; shard_id: string }>(
        `SELECT biz_id, result, shard_id FROM timeout_center.done_timeouts WHERE id = ANY ($1::bigint[]) ORDER BY id`,
        [ids],
      )
    ).rows;
    expect(history).toHaveLength(6);
    for (const h of history) expect(h.shard_id).toBe(String(s.id));
    expect(history.filter((h) => h.result === 'applied').map((h) => h.biz_id)).toEqual(history.slice(0, 4).map((h) => h.biz_id));
    expect(history.filter((h) => h.result === 'skipped')).toHaveLength(2);
  });

  it('5. a ctid list that names a row the claim did not lock moves fewer rows than claimed', async () => {
    await clearDue();
    await due(3);
    const s = await shard(3);
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const { ctids } = (await c.query<{ ctids: string }>({ text: claimTwoPhase(s, 3), types: AS_TEXT_ROWS })).rows[0]!;
      const wrong = ctids.replace(/^\{"?\((\d+),(\d+)\)"?/, '{"(999999,1)"');
      expect(wrong).not.toBe(ctids);
      const moved = (await c.query<{ moved: number }>(sql('worker/external_two_phase_move', { shardId: s.id, leaseToken: s.token, ctids: wrong, applied: [] })))
        .rows[0]!;
      expect(moved.moved).toBe(2);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
  });
});
