// The embedded mode's parts on their own: PGlite behind the wire protocol with many pool clients
// at once (the stock pglite-socket multiplexer interleaves extended-protocol messages and fails
// here), the in-process shard channel's at-least-once contract, and leadership on the local lock
// with the fencing epoch in the embedded database.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalLeaderLock } from '../../src/coordinator/leader-lock.js';
import { Leadership } from '../../src/coordinator/leadership.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { InProcessChannel } from '../../src/transport/in-process.js';

const logger = pino({ level: 'silent' });

describe('in-process shard channel', () => {
  const msg = (shardId: number) => ({ shardId, scanId: 1, kind: 'k' });

  it('delivers each message once to one consumer, keeps it pending until acked, and lets another consumer reclaim it', async () => {
    const ch = new InProcessChannel();
    expect(await ch.checkLostAndMark()).toBe(true); // first start: the coordinator republishes from PostgreSQL
    expect(await ch.checkLostAndMark()).toBe(false);
    await ch.publish([msg(1), msg(2), msg(3)]);
    const a = await ch.receive('a', ['k'], 2, 10);
    const b = await ch.receive('b', ['k'], 5, 10);
    expect(a.map((d) => d.message.shardId)).toEqual([1, 2]);
    expect(b.map((d) => d.message.shardId)).toEqual([3]);
    expect(await ch.depth()).toEqual({ waiting: 0, pending: 3 });
    await ch.ack([a[0]!]);
    expect(await ch.reclaim('b', ['k'], 60_000, 10)).toEqual([]); // not idle long enough
    await new Promise((r) => setTimeout(r, 30));
    const taken = await ch.reclaim('b', ['k'], 20, 10);
    expect(taken.map((d) => [d.message.shardId, d.reclaimed])).toEqual([[2, true]]);
    await ch.ack([...taken, ...b]);
    expect(await ch.depth()).toEqual({ waiting: 0, pending: 0 });
    await ch.close();
  });

  it('routes by kind: a consumer receives and reclaims only the kinds it asks for', async () => {
    const ch = new InProcessChannel();
    await ch.publish([
      { shardId: 1, scanId: 1, kind: 'a' },
      { shardId: 2, scanId: 1, kind: 'b' },
      { shardId: 3, scanId: 1, kind: 'a' },
    ]);
    expect((await ch.receive('wb', ['b'], 10, 10)).map((d) => d.message.shardId)).toEqual([2]);
    expect(await ch.receive('wb', ['b'], 10, 10)).toEqual([]);
    expect((await ch.receive('wa', ['a'], 10, 10)).map((d) => d.message.shardId)).toEqual([1, 3]);
    await new Promise((r) => setTimeout(r, 30));
    expect((await ch.reclaim('wb', ['b'], 20, 10)).map((d) => d.message.shardId)).toEqual([]); // a's are not b's to take
    expect((await ch.reclaim('wa2', ['a'], 20, 10)).map((d) => d.message.shardId)).toEqual([1, 3]);
    await ch.close();
  });

  it('a blocked receive wakes up on publish, and returns empty after blockMs otherwise', async () => {
    const ch = new InProcessChannel();
    await ch.receive('w', ['k'], 1, 1); // first read: own pending (none)
    const t0 = Date.now();
    expect(await ch.receive('w', ['k'], 1, 50)).toEqual([]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(40);
    const pending = ch.receive('w', ['k'], 1, 5000);
    setTimeout(() => void ch.publish([msg(7)]), 20);
    const t1 = Date.now();
    expect((await pending).map((d) => d.message.shardId)).toEqual([7]);
    expect(Date.now() - t1).toBeLessThan(1000);
    await ch.close();
  });
});

describe('local leader lock', () => {
  it('has one holder at a time, renews, and can be taken over once expired', async () => {
    const lock = new LocalLeaderLock();
    const first = await lock.acquire('k', 50);
    await expect(lock.acquire('k', 50)).rejects.toThrow(/held/);
    const renewed = await first.extend(50);
    expect(renewed.expiration).toBeGreaterThanOrEqual(first.expiration);
    await new Promise((r) => setTimeout(r, 70));
    const second = await lock.acquire('k', 1000);
    await expect(renewed.extend(50)).rejects.toThrow(/lost/);
    await renewed.release(); // not ours any more: must not free the new holder's lock
    await expect(lock.acquire('k', 50)).rejects.toThrow(/held/);
    await second.release();
    await (await lock.acquire('k', 50)).release();
  });
});

describe('embedded PostgreSQL (PGlite over the wire protocol)', () => {
  let dir: string;
  let embedded: EmbeddedPostgres;
  let pool: pg.Pool;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tc-embedded-'));
    embedded = await startEmbeddedPostgres({ dataDir: dir, logger });
    pool = createPool({ connectionString: embedded.url, max: 8, applicationName: 'embedded test', logger, idleInTransactionTimeoutMs: 30_000 });
    await migrate(pool, logger);
  });

  afterAll(async () => {
    await pool?.end();
    await embedded?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('runs the schema, and serves many pool clients at once: parameterised queries, transactions, savepoints, errors', async () => {
    await pool.query("INSERT INTO timeout_center.kinds (kind) VALUES ('k')");
    await pool.query("INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'k', g::text, now() FROM generate_series(1, 1000) g");
    const mismatches: string[] = [];
    const tasks: Promise<unknown>[] = [];
    for (let i = 0; i < 100; i += 1) {
      tasks.push(
        (async () => {
          const c = await pool.connect();
          try {
            await c.query('BEGIN');
            const { rows } = await c.query<{ id: number }>(
              "SELECT id FROM timeout_center.timeouts WHERE state = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
              [5],
            );
            await new Promise((r) => setTimeout(r, 1)); // other clients queue up meanwhile
            await c.query('SAVEPOINT s');
            await c.query('SELECT 1 / 0').catch(() => {});
            await c.query('ROLLBACK TO SAVEPOINT s');
            await c.query("UPDATE timeout_center.timeouts SET state = 'done', finished_at = now() WHERE id = ANY($1)", [rows.map((r) => r.id)]);
            await c.query('COMMIT');
          } finally {
            c.release();
          }
        })(),
      );
      tasks.push(
        pool.query<{ s: number; t: string }>('SELECT $1::int + $2::int AS s, $3::text AS t', [i, 1, `x${i}`]).then((r) => {
          if (r.rows[0]?.s !== i + 1 || r.rows[0]?.t !== `x${i}`) mismatches.push(`${i}: ${JSON.stringify(r.rows[0])}`);
        }),
      );
      tasks.push(expect(pool.query('SELECT 1 / 0')).rejects.toThrow(/division by zero/));
    }
    await Promise.all(tasks);
    expect(mismatches).toEqual([]);
    const { rows } = await pool.query<{ done: number }>("SELECT count(*)::int AS done FROM timeout_center.all_timeouts WHERE state = 'done'");
    expect(rows[0]!.done).toBe(500); // every transaction claimed 5 rows no other claimed
  });

  it('leadership on the local lock: one leader, fencing epoch bumped in the embedded database on takeover', async () => {
    const lock = new LocalLeaderLock();
    const make = (id: string) => new Leadership({ lock, pool, lockKey: 'tc:coordinator-lock', ttlMs: 600, coordinatorId: id, logger });
    const a = make('a');
    const b = make('b');
    const elected: string[] = [];
    a.on('elected', () => elected.push('a'));
    b.on('elected', () => elected.push('b'));
    a.start();
    await new Promise((r) => setTimeout(r, 100));
    b.start();
    await new Promise((r) => setTimeout(r, 700));
    expect(elected).toEqual(['a']);
    expect(a.isLeader && !b.isLeader).toBe(true);
    const firstEpoch = a.epoch;
    await a.stop(); // releases the lock: b takes over within a third of the TTL
    await new Promise((r) => setTimeout(r, 600));
    expect(elected).toEqual(['a', 'b']);
    expect(b.epoch).toBeGreaterThan(firstEpoch);
    const { rows } = await pool.query<{ epoch: number; holder: string }>('SELECT epoch, holder FROM timeout_center.coordinator_lease');
    expect(rows[0]).toEqual({ epoch: b.epoch, holder: 'b' });
    await b.stop();
  });
});
