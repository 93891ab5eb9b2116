// Settle on read (issue 33): timeout_center.settle and the Node settle() over it answer each case
// as documented (sql/0021): applied, skipped, not_due, paused, limited, busy, already_final,
// not_found, unsupported, failed; the history records a settle with no shard and its actor; a
// worker holding the row is waited for (bounded) and a row settle holds is passed over by a claim.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql as statementOf } from '../../src/db/queries.js';
import { pino } from 'pino';
import { loadConfig } from '../../src/config.js';
import { settle } from '../../src/settle/settle.js';
import { Settler } from '../../src/settle/settler.js';
import { PermanentError, type ShardHandler } from '../../src/worker/handler-contract.js';
import { settleTemplate } from '../../src/settle/settle-statement.js';
import { StoreRouter } from '../../src/stores/store-router.js';
import { UnknownKindError } from '../../src/schedule.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

let db: TestDatabase;
let pool: pg.Pool;
let nextId = 1;
let env: Record<string, string>;

const KIND = 'order.unpaid';
const PAYLOAD_SQL = "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND ($2::jsonb[])[1] ->> 'close' = 'yes' RETURNING id";

// Two business databases the center does not own, for a kind routed over them by order id.
let bizA: TestDatabase;
let bizB: TestDatabase;
let poolB: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase('settle');
  pool = new pg.Pool({ connectionString: db.url, max: 6 });
  await createOrdersSchema(pool);
  bizA = await createTestDatabase('settle-biz-a');
  bizB = await createTestDatabase('settle-biz-b');
  poolB = new pg.Pool({ connectionString: bizB.url, max: 2 });
  await createOrdersSchema(poolB);
  env = {
    DATABASE_URL: db.url,
    REDIS_URL: TEST_REDIS_URL,
    TIMEOUT_CENTER_CONFIG: writeConfig({
      businessDatabases: { orders_a: { url: bizA.url }, orders_b: { url: bizB.url } },
      kinds: {
        'order.routed': { handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: ['orders_a', 'orders_b'] } } },
        [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.payload': { handler: { type: 'sql', sql: PAYLOAD_SQL } },
        'order.capped': { maxRunningShards: 1, handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.rated': { rateLimit: 2, handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.http': { handler: { type: 'http', url: 'http://127.0.0.1:9/close' } },
        // Code handlers, registered on the Settler (no module): they run on the external path.
        'order.code': { handler: { type: 'code' } },
        'order.code.capped': { maxRunningShards: 1, handler: { type: 'code' } },
        'order.code.unregistered': { handler: { type: 'code' } },
        // A % in the statement reaches PostgreSQL as written (the template doubles it).
        'order.percent': { handler: { type: 'sql', sql: "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND status LIKE 'unp%' RETURNING id" } },
      },
    }),
  };
  const migrated = await runCli(['migrate'], env);
  expect(migrated.code, migrated.stderr).toBe(0);
});

afterAll(async () => {
  await poolB?.end();
  await bizA?.drop();
  await bizB?.drop();
  await tearDown({ pool, db });
});

/** An order and its timeout, due `dueInMs` from now (negative: overdue). */
async function order(opts: { kind?: string; status?: string; dueInMs?: number; poison?: boolean; payload?: unknown } = {}): Promise<string> {
  const id = nextId++;
  await pool.query(`INSERT INTO orders (id, status, poison) VALUES ($1, $2, $3)`, [id, opts.status ?? 'unpaid', opts.poison ?? false]);
  await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, payload) VALUES ($1, $2, now() + $3 * interval '1 millisecond', $4)`, [
    opts.kind ?? KIND,
    String(id),
    opts.dueInMs ?? -1000,
    opts.payload === undefined ? null : JSON.stringify(opts.payload),
  ]);
  return String(id);
}

async function status(id: string): Promise<string> {
  const { rows } = await pool.query<{ status: string }>('SELECT status FROM orders WHERE id = $1', [id]);
  return rows[0]!.status;
}

async function history(id: string, kind = KIND) {
  const { rows } = await pool.query<{ result: string; shard_id: string | null; settled_by: string | null; attempts: number }>(
    'SELECT result, shard_id, settled_by, attempts FROM timeout_center.done_timeouts WHERE kind = $1 AND biz_id = $2',
    [kind, id],
  );
  return rows;
}

describe('settle on read', () => {
  it('applies a due timeout with the kind handler and records it with no shard and the settler', async () => {
    const id = await order();
    const r = await settle(pool, KIND, id);
    expect(r).toMatchObject({ outcome: 'applied', state: 'done', result: 'applied', bizId: id });
    expect(r.timeoutId).toBeGreaterThan(0);
    expect(await status(id)).toBe('closed');
    expect(await history(id)).toEqual([{ result: 'applied', shard_id: null, settled_by: 'postgres', attempts: 1 }]);
    // Settled once: a second settle finds nothing live.
    expect((await settle(pool, KIND, id)).outcome).toBe('not_found');
  });

  it('records skipped when the guard refuses (already paid), from SQL as from Node', async () => {
    const id = await order({ status: 'paid' });
    const { rows } = await pool.query(`SELECT * FROM timeout_center.settle($1, $2)`, [KIND, id]);
    expect(rows[0]).toMatchObject({ outcome: 'skipped', result: 'skipped', state: 'done' });
    expect(await status(id)).toBe('paid');
    expect((await history(id))[0]).toMatchObject({ result: 'skipped', shard_id: null });
  });

  it('names the actor of the session (timeout_center.actor) in the history', async () => {
    const id = await order();
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SELECT set_config('timeout_center.actor', 'reader-7', true)`);
      expect((await settle(client, KIND, id)).outcome).toBe('applied');
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect((await history(id))[0]!.settled_by).toBe('reader-7');
  });

  it('answers not_due, and leaves the timeout alone', async () => {
    const id = await order({ dueInMs: 60_000 });
    const r = await settle(pool, KIND, id);
    expect(r).toMatchObject({ outcome: 'not_due', state: 'pending' });
    expect(r.dueAt!.getTime()).toBeGreaterThan(Date.now() + 50_000);
    expect(await status(id)).toBe('unpaid');
  });

  it('answers already_final for a cancelled timeout it waited for, not_found for an unknown id, and refuses an unknown kind', async () => {
    expect((await settle(pool, KIND, '999999')).outcome).toBe('not_found');
    await expect(settle(pool, 'order.nope', '1')).rejects.toBeInstanceOf(UnknownKindError);
    await expect(settle(pool, KIND, '')).rejects.toThrow(/bizId/);
    // A payer cancels the timeout while settle waits for its row lock.
    const id = await order();
    const payer = await pool.connect();
    try {
      await payer.query('BEGIN');
      await payer.query(`UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = $1 AND biz_id = $2`, [KIND, id]);
      const settling = settle(pool, KIND, id, { waitMs: 5000 });
      await new Promise((r) => setTimeout(r, 200));
      await payer.query(`UPDATE orders SET status = 'paid' WHERE id = $1`, [id]);
      await payer.query('COMMIT');
      expect(await settling).toMatchObject({ outcome: 'already_final', state: 'cancelled' });
    } finally {
      payer.release();
    }
    expect(await status(id)).toBe('paid');
  });

  it('answers paused while the kind is paused, and applies once it resumes', async () => {
    const id = await order();
    await pool.query(`UPDATE timeout_center.kinds SET paused = true WHERE kind = $1`, [KIND]);
    try {
      expect((await settle(pool, KIND, id)).outcome).toBe('paused');
      expect(await status(id)).toBe('unpaid');
    } finally {
      await pool.query(`UPDATE timeout_center.kinds SET paused = false WHERE kind = $1`, [KIND]);
    }
    expect((await settle(pool, KIND, id)).outcome).toBe('applied');
  });

  it('answers limited for a kind at its max running shards, and for one past its rate over the last second', async () => {
    const capped = await order({ kind: 'order.capped' });
    const { rows: scan } = await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
    const { rows: shard } = await pool.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state) VALUES ($1, 'order.capped', 0, 0, 10, 'running') RETURNING id`,
      [scan[0].id],
    );
    expect((await settle(pool, 'order.capped', capped)).outcome).toBe('limited');
    await pool.query(`UPDATE timeout_center.shards SET state = 'done', finished_at = now() WHERE id = $1`, [shard[0].id]);
    expect((await settle(pool, 'order.capped', capped)).outcome).toBe('applied');

    // rate 2/s: two settles in the same second go through, the third waits for the scan.
    const rated = [await order({ kind: 'order.rated' }), await order({ kind: 'order.rated' }), await order({ kind: 'order.rated' })];
    const outcomes = [];
    for (const id of rated) outcomes.push((await settle(pool, 'order.rated', id)).outcome);
    expect(outcomes).toEqual(['applied', 'applied', 'limited']);
  });

  it('passes payloads to a handler that takes $2, and keeps a % in the statement', async () => {
    const yes = await order({ kind: 'order.payload', payload: { close: 'yes' } });
    const no = await order({ kind: 'order.payload', payload: { close: 'no' } });
    expect((await settle(pool, 'order.payload', yes)).outcome).toBe('applied');
    expect((await settle(pool, 'order.payload', no)).outcome).toBe('skipped');
    expect([await status(yes), await status(no)]).toEqual(['closed', 'unpaid']);
    const pct = await order({ kind: 'order.percent' });
    expect((await settle(pool, 'order.percent', pct)).outcome).toBe('applied');
    expect(settleTemplate('UPDATE t SET a = 1 WHERE id = ANY($1) AND $3 RETURNING id')).toBeUndefined();
  });

  it('answers unsupported for a handler that runs elsewhere (HTTP), and failed (nothing changed) when the handler raises', async () => {
    const http = await order({ kind: 'order.http' });
    const r = await settle(pool, 'order.http', http);
    expect(r.outcome).toBe('unsupported');
    expect(r.detail).toMatch(/http handler/);
    // The SQL function names where such a kind is settled.
    expect(r.detail).toMatch(/Settler\.settle.*POST \/v1\/timeouts\/\{kind\}\/\{bizId\}\/settle/);
    const poison = await order({ poison: true });
    const f = await settle(pool, KIND, poison);
    expect(f.outcome).toBe('failed');
    expect(f.detail).toMatch(/cannot be closed/);
    const { rows } = await pool.query(`SELECT state, attempts FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2`, [KIND, poison]);
    expect(rows[0]).toEqual({ state: 'pending', attempts: 0 });
    // The caller's lock_timeout is left as it was.
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL lock_timeout = '7s'`);
      await settle(client, KIND, poison);
      const { rows: lt } = await client.query(`SELECT current_setting('lock_timeout') AS v`);
      expect(lt[0].v).toBe('7s');
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });

  it('waits (bounded) for a worker that holds the row: busy past waitMs, already_final once it commits the apply', async () => {
    const id = await order();
    const worker = await pool.connect();
    try {
      // What a shard transaction holds: the row, locked by the claim.
      await worker.query('BEGIN');
      await worker.query(`SELECT id FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2 FOR UPDATE`, [KIND, id]);
      const started = performance.now();
      expect((await settle(pool, KIND, id, { waitMs: 0 })).outcome).toBe('busy');
      expect((await settle(pool, KIND, id, { waitMs: 300 })).outcome).toBe('busy');
      expect(performance.now() - started).toBeGreaterThanOrEqual(300);
      // The worker applies and moves the row, as claim.sql does, and commits while settle waits.
      const settling = settle(pool, KIND, id, { waitMs: 10_000 });
      await new Promise((r) => setTimeout(r, 200));
      await worker.query(`UPDATE orders SET status = 'closed' WHERE id = $1`, [id]);
      await worker.query(
        `WITH taken AS (DELETE FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2 RETURNING *)
         INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, payload, attempts, shard_id, result, created_at, finished_at)
         SELECT id, kind::text, biz_id, due_at, payload, attempts + 1, 4242, 'applied', created_at, now() FROM taken`,
        [KIND, id],
      );
      await worker.query('COMMIT');
      expect(await settling).toMatchObject({ outcome: 'already_final', state: 'done', result: 'applied', shardId: 4242 });
    } finally {
      worker.release();
    }
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM order_transitions WHERE order_id = $1`, [id]);
    expect(rows[0].n).toBe(1);
  });

  it('holds the row while its transaction lasts: a claim passes over it (SKIP LOCKED)', async () => {
    const id = await order();
    const reader = await pool.connect();
    try {
      await reader.query('BEGIN');
      expect((await settle(reader, KIND, id)).outcome).toBe('applied');
      // A shard's claim now, before the settle commits: it does not see the row as claimable.
      const { rows: scan } = await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
      const { rows: shard } = await pool.query(
        `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit) VALUES ($1, $2, 0, 0, 1000) RETURNING id`,
        [scan[0].id, KIND],
      );
      const claim = statementOf('worker/claim', { shardId: Number(shard[0].id), kind: KIND, claimLimit: 1000, batch: false });
      const { rows } = await pool.query<{ biz_ids: string[] }>(claim);
      expect(rows[0]!.biz_ids).not.toContain(id);
      await reader.query('COMMIT');
    } finally {
      reader.release();
    }
    expect(await history(id)).toHaveLength(1);
  });

  it('routes to the database holding the timeout (StoreRouter)', async () => {
    const id = await order();
    const router = new StoreRouter(pool, {});
    expect((await router.settle(KIND, id)).outcome).toBe('applied');
  });
});

// Kinds whose handler runs outside the database holding the timeout (business database, HTTP,
// code): the Settler runs the timeout as a one-row shard through the workers' external executor
// (src/settle/settler.ts, sql/0023). The race with workers is test/faults/settle-external-race.test.ts.
describe('settle through the shard protocol (Settler), for a handler that runs elsewhere', () => {
  let settler: Settler;
  const calls: string[][] = [];
  /** Not idempotent on purpose: closes the orders it is given whatever their state (but paid). */
  const close: ShardHandler = async (items, ctx) => {
    calls.push(items.map((i) => i.bizId));
    if (items.some((i) => i.bizId === failing)) throw new PermanentError('order refuses to close');
    const { rows } = await ctx.client.query<{ id: string }>(
      "UPDATE orders SET status = 'closed' WHERE id = ANY($1::bigint[]) AND status <> 'paid' RETURNING id::text",
      [items.map((i) => i.bizId)],
    );
    return rows.map((r) => r.id);
  };
  let failing = '';

  beforeAll(() => {
    settler = new Settler({ config: loadConfig({ env }), pool, logger: pino({ level: 'silent' }) });
    settler.registerHandler('order.code', close).registerHandler('order.code.capped', close);
  });
  afterAll(() => settler.close());

  async function shardOf(id: number) {
    const { rows } = await pool.query(
      `SELECT sh.state, sh.owner, sh.settled_by, sh.size, sh.done_count, sh.held_ids, sc.coordinator, sc.shard_count
         FROM timeout_center.shards sh JOIN timeout_center.scans sc ON sc.id = sh.scan_id WHERE sh.id = $1`,
      [id],
    );
    return rows[0];
  }

  it('applies a due timeout as a one-row shard of a one-shard scan, recorded with that shard and the settler', async () => {
    const id = await order({ kind: 'order.code' });
    calls.length = 0;
    const r = await settler.settle('order.code', id);
    expect(r).toMatchObject({ outcome: 'applied', state: 'done', result: 'applied', bizId: id });
    expect(calls).toEqual([[id]]);
    expect(await status(id)).toBe('closed');
    const [h] = await history(id, 'order.code');
    expect(h).toMatchObject({ result: 'applied', settled_by: 'postgres', attempts: 1 });
    expect(Number(h!.shard_id)).toBe(r.shardId);
    expect(await shardOf(r.shardId!)).toMatchObject({
      state: 'done',
      owner: settler.id,
      settled_by: 'postgres',
      size: 1,
      done_count: 1,
      held_ids: null,
      coordinator: 'settle',
      shard_count: 1,
    });
    // The marker (in the center's database for a code handler without one) is gone once recorded.
    const { rows: markers } = await pool.query('SELECT count(*)::int AS n FROM timeout_center.markers WHERE shard_id = $1', [r.shardId]);
    expect(markers[0].n).toBe(0);
    // The settler announced itself like a worker (no kinds), so the reaper does not take its shards.
    const { rows: me } = await pool.query('SELECT kinds FROM timeout_center.workers WHERE worker_id = $1', [settler.id]);
    expect(me[0]).toEqual({ kinds: [] });
    // Once: nothing live any more, and the handler is not called again.
    expect((await settler.settle('order.code', id)).outcome).toBe('not_found');
    expect(calls).toHaveLength(1);
  });

  it('applies a kind routed over business databases in the database its rule picks, with the marker protocol', async () => {
    const id = 7001; // odd: orders_b
    await poolB.query(`INSERT INTO orders (id, status) VALUES ($1, 'unpaid')`, [id]);
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.routed', $1, now() - interval '1 second')`, [String(id)]);
    const r = await settler.settle('order.routed', id);
    expect(r).toMatchObject({ outcome: 'applied', state: 'done', result: 'applied' });
    const { rows: closed } = await poolB.query('SELECT status FROM orders WHERE id = $1', [id]);
    expect(closed[0]).toEqual({ status: 'closed' });
    const { rows: shard } = await pool.query('SELECT target, settled_by FROM timeout_center.shards WHERE id = $1', [r.shardId]);
    expect(shard[0]).toEqual({ target: 'orders_b', settled_by: 'postgres' });
    const { rows: markers } = await poolB.query('SELECT count(*)::int AS n FROM timeout_center.markers');
    expect(markers[0].n).toBe(0);
    // The SQL function cannot reach orders_b: it names the API instead.
    await poolB.query(`INSERT INTO orders (id, status) VALUES (7003, 'unpaid')`);
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.routed', '7003', now() - interval '1 second')`);
    expect((await settle(pool, 'order.routed', '7003')).outcome).toBe('unsupported');
  });

  it('answers skipped, not_due, paused and limited as settle does, binding nothing', async () => {
    const paid = await order({ kind: 'order.code', status: 'paid' });
    expect(await settler.settle('order.code', paid)).toMatchObject({ outcome: 'skipped', result: 'skipped', state: 'done' });
    expect(await status(paid)).toBe('paid');
    const { rows: before } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.shards`);
    const later = await order({ kind: 'order.code', dueInMs: 60_000 });
    expect((await settler.settle('order.code', later)).outcome).toBe('not_due');
    const id = await order({ kind: 'order.code' });
    await pool.query(`UPDATE timeout_center.kinds SET paused = true WHERE kind = 'order.code'`);
    try {
      expect((await settler.settle('order.code', id)).outcome).toBe('paused');
    } finally {
      await pool.query(`UPDATE timeout_center.kinds SET paused = false WHERE kind = 'order.code'`);
    }
    const capped = await order({ kind: 'order.code.capped' });
    const { rows: scan } = await pool.query(`INSERT INTO timeout_center.scans (epoch, coordinator, cutoff) VALUES (1, 'test', now()) RETURNING id`);
    const { rows: shard } = await pool.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state) VALUES ($1, 'order.code.capped', 0, 0, 10, 'running') RETURNING id`,
      [scan[0].id],
    );
    expect((await settler.settle('order.code.capped', capped)).outcome).toBe('limited');
    const { rows: after } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.shards`);
    expect(after[0]!.n).toBe(before[0]!.n + 1); // only the test's own shard
    await pool.query(`UPDATE timeout_center.shards SET state = 'done', finished_at = now() WHERE id = $1`, [shard[0].id]);
    expect((await settler.settle('order.code.capped', capped)).outcome).toBe('applied');
    expect((await settler.settle('order.code', id)).outcome).toBe('applied');
  });

  it('answers busy for a row a live shard holds (held_ids), and never runs the handler on it', async () => {
    const id = await order({ kind: 'order.code' });
    // Another settler bound it (a live shard holds it, not run yet): what a worker's external claim leaves too.
    const { rows: bound } = await pool.query(`SELECT outcome, shard_id FROM timeout_center.settle_run('order.code', $1, 0, 'someone', 60000)`, [id]);
    expect(bound[0].outcome).toBe('bound');
    calls.length = 0;
    const r = await settler.settle('order.code', id);
    expect(r).toMatchObject({ outcome: 'busy', shardId: Number(bound[0].shard_id) });
    expect(r.detail).toMatch(/held by shard/);
    expect(calls).toEqual([]);
    // The SQL function says the same, and a cancel is refused while the shard holds it.
    const { rows } = await pool.query(`SELECT outcome FROM timeout_center.settle('order.code', $1)`, [id]);
    expect(rows[0].outcome).toBe('busy');
    const { rowCount } = await pool.query(`UPDATE timeout_center.timeouts SET state = 'cancelled' WHERE kind = 'order.code' AND biz_id = $1`, [id]);
    expect(rowCount).toBe(0);
    expect(await status(id)).toBe('unpaid');
  });

  it('answers failed when the handler fails (the row is failed or retried as a worker would record it), unsupported when it cannot run here', async () => {
    failing = await order({ kind: 'order.code' });
    const r = await settler.settle('order.code', failing);
    expect(r).toMatchObject({ outcome: 'failed', state: 'failed' });
    expect(r.detail).toMatch(/refuses to close/);
    expect(await status(failing)).toBe('unpaid');
    // The target down (HTTP to a closed port): a batch-level failure, nothing changes, the scan retries later.
    const http = await order({ kind: 'order.http' });
    const h = await settler.settle('order.http', http);
    expect(h).toMatchObject({ outcome: 'failed', state: 'pending' });
    expect(h.availableAt!.getTime()).toBeGreaterThan(Date.now() - 1000);
    const { rows } = await pool.query(`SELECT attempts FROM timeout_center.timeouts WHERE kind = 'order.http' AND biz_id = $1`, [http]);
    expect(rows[0]).toEqual({ attempts: 0 });
    // A code kind whose handler this process does not have: nothing bound, the workers apply it.
    const lone = await order({ kind: 'order.code.unregistered' });
    const u = await settler.settle('order.code.unregistered', lone);
    expect(u.outcome).toBe('unsupported');
    expect(u.detail).toMatch(/registerHandler/);
    const { rows: t } = await pool.query(`SELECT state FROM timeout_center.timeouts WHERE kind = 'order.code.unregistered' AND biz_id = $1`, [lone]);
    expect(t[0]).toEqual({ state: 'pending' });
    // Kinds whose handler runs here go to timeout_center.settle as before.
    expect((await settler.settle(KIND, await order())).outcome).toBe('applied');
  });
});
