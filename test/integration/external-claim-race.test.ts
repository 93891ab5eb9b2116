// Two claims of the external path side by side (external_claim_lock.sql, external_unhold.sql).
// A claim locks the rows it takes only until its COMMIT and reads the ids other shards hold with
// its statement's snapshot, so a claim running beside another could lock rows the other had just
// committed and had to give them back: in a 50,000 burst a shard kept 586 of its 5,000 rows and
// the rest waited 80-90 ms for another plan (measured with npm run bench:external -- --profile).
//   1. A second claim of the same kind and target waits for the first one's COMMIT, then takes
//      its full limit, none of the first one's rows, and gives nothing back.
//   2. A claim of another target does not wait.
//   3. What still comes back (a row a settle on read bound meanwhile) is named by biz_id.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../src/db/queries.js';
import { bindLiterals } from '../../src/worker/bind-literals.js';
import { writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
const SHARD = 500;

describe('external claims side by side', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let scanId: number;

  beforeAll(async () => {
    db = await createTestDatabase('claim-race');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    const config = writeConfig({
      businessDatabases: Object.fromEntries(['b0', 'b1'].map((b) => [b, { url: db.url }])),
      kinds: {
        [KIND]: {
          handler: {
            type: 'sql',
            sql: 'UPDATE orders SET status = $$closed$$ WHERE id = ANY($1) RETURNING id',
            route: { by: 'modulo', databases: ['b0', 'b1'] },
          },
        },
      },
    });
    const migrated = await runCli(['migrate', '--config', config], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL });
    expect(migrated.code, migrated.stderr).toBe(0);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, g::text, now() - interval '1 minute' FROM generate_series(1, 4000) g`,
      [KIND],
    );
    scanId = Number((await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`)).rows[0].id);
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  let seq = 0;
  const shard = async (target: string) => {
    const { rows } = await pool.query<{ id: string; lease_token: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, state, lease_token, claim_limit, target)
       VALUES ($1, $2, $3, $4, 'running', gen_random_uuid(), $4, $5) RETURNING id, lease_token`,
      [scanId, KIND, (seq += 1), SHARD, target],
    );
    return { id: Number(rows[0]!.id), token: rows[0]!.lease_token };
  };
  /** The worker's claim transaction (external-executor.ts claim), without its COMMIT. */
  const claimStatements = (s: { id: number; token: string }) =>
    [
      sql('worker/external_claim_lock', { shardId: s.id }),
      sql('worker/external_claim', { shardId: s.id, kind: KIND, claimLimit: SHARD, leaseToken: s.token, routed: true, payloads: false }),
      sql('worker/external_unhold', { shardId: s.id, kind: KIND }),
    ].map((st) => bindLiterals(st));
  const claimedBy = async (client: pg.ClientBase, s: { id: number; token: string }) => {
    const [lock, claim, unhold] = claimStatements(s);
    await client.query(lock!);
    const taken = (await client.query<{ biz_ids: string[] }>(claim!)).rows[0]!.biz_ids;
    const givenBack = (await client.query<{ given_back: string[] }>(unhold!)).rows[0]!.given_back;
    return { taken, givenBack };
  };
  const waitingOnAdvisory = async () =>
    (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`)).rows[0]!.n;

  it('a second claim of the same kind and target waits for the first COMMIT, then takes its full limit and gives nothing back', async () => {
    const first = await pool.connect();
    const second = await pool.connect();
    try {
      const a = await shard('b0');
      const b = await shard('b0');
      await first.query('BEGIN');
      const byA = await claimedBy(first, a);
      expect(byA.taken).toHaveLength(SHARD);
      await second.query('BEGIN');
      const byB = claimedBy(second, b);
      let waited = false;
      for (let i = 0; i < 50 && !waited; i += 1) {
        waited = (await waitingOnAdvisory()) > 0;
        if (!waited) await new Promise((r) => setTimeout(r, 20));
      }
      expect(waited, "the second claim waits on the first one's lock").toBe(true);
      await first.query('COMMIT');
      const got = await byB;
      await second.query('COMMIT');
      expect(got.taken).toHaveLength(SHARD);
      expect(got.givenBack).toEqual([]);
      expect(got.taken.filter((id) => byA.taken.includes(id))).toEqual([]);
    } finally {
      first.release();
      second.release();
    }
  });

  it('a claim of another target does not wait', async () => {
    const first = await pool.connect();
    const other = await pool.connect();
    try {
      const a = await shard('b0');
      const c = await shard('b1');
      await first.query('BEGIN');
      await claimedBy(first, a);
      await other.query('BEGIN');
      const got = await claimedBy(other, c);
      await other.query('COMMIT');
      await first.query('COMMIT');
      expect(got.taken).toHaveLength(SHARD);
    } finally {
      first.release();
      other.release();
    }
  });

  it('gives back, by biz_id, a row another live shard held first', async () => {
    const a = await shard('b1');
    const b = await shard('b1');
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const byA = await claimedBy(client, a);
      await client.query('COMMIT');
      // as a settle on read would: one of A's rows bound to B too, after B's claim read what A holds
      const row = byA.taken[0]!;
      await client.query(
        `UPDATE timeout_center.shards SET held_ids = ARRAY(SELECT id FROM timeout_center.timeouts WHERE kind = $2 AND biz_id = $3), claimed_at = now() WHERE id = $1`,
        [b.id, KIND, row],
      );
      await client.query('BEGIN');
      const { rows } = await client.query<{ given_back: string[] }>(bindLiterals(sql('worker/external_unhold', { shardId: b.id, kind: KIND })));
      await client.query('COMMIT');
      expect(rows[0]!.given_back).toEqual([row]);
      const held = await client.query<{ n: number }>(`SELECT cardinality(held_ids) AS n FROM timeout_center.shards WHERE id = $1`, [b.id]);
      expect(held.rows[0]!.n).toBe(0);
    } finally {
      client.release();
    }
  });
});
