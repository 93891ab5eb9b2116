// Flow control per kind with real processes (coordinator and workers as separate OS processes,
// real PostgreSQL and Redis): a rate limit, a cap on running shards, pause / resume, and changes
// made mid-drain, all holding across the whole fleet. Two fleets run side by side to keep the file
// short: fleet R (3 workers) for the rate limits, fleet C (4 workers) for the cap and the pause.
//
// How rates are measured: at commit. Two measures, both asserted: (a) the timeouts' finished_at,
// which is statement_timestamp() of the claim inside the shard's transaction (the commit follows
// within the shard's few milliseconds); (b) what a separate session sees committed, polled every
// 100 ms (its statement_timestamp() against the count of done rows), fitted by least squares
// between 10 % and 90 % of the drain.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { sql } from '../../src/db/queries.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { CLI, killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

/** Closes the orders like CLOSE_SQL, and takes 200 ms per shard (one sleep per statement), so
 *  running shards are there to be counted. */
const SLOW_CLOSE_SQL =
  "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' AND (SELECT pg_sleep(0.2)) IS NOT NULL RETURNING id";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

class Fleet {
  readonly procs: CliProcess[] = [];
  coordinator!: CliProcess;
  metricsPort = 0;

  private constructor(
    readonly db: TestDatabase,
    readonly pool: pg.Pool,
    readonly env: Record<string, string>,
  ) {}

  static async start(label: string, kinds: ConfigInput['kinds'], workers: number, extra: Partial<ConfigInput> = {}): Promise<Fleet> {
    const db = await createTestDatabase(label);
    const pool = new pg.Pool({ connectionString: db.url, max: 6 });
    await createOrdersSchema(pool);
    const configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix(label),
      kinds,
      coordinator: { lockTtlMs: 3000, lagCheckIntervalMs: 1000 },
      worker: { concurrency: 2, leaseMs: 15_000, blockMs: 200 },
      ...extra,
    });
    const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    const fleet = new Fleet(db, pool, env);
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
    fleet.coordinator = fleet.spawn(`${label}-coordinator`, ['coordinator', '--port', '0']);
    for (let i = 1; i <= workers; i += 1) fleet.spawn(`${label}-worker-${i}`, ['worker']);
    fleet.metricsPort = Number((await fleet.coordinator.waitForMsg('serving /metrics, /healthz, /readyz'))['port']);
    await fleet.coordinator.waitForMsg('became leader');
    await Promise.all(fleet.procs.slice(1).map((p) => p.waitForMsg('worker started')));
    return fleet;
  }

  private spawn(name: string, args: string[]): CliProcess {
    const p = spawnCli(name, args, this.env);
    this.procs.push(p);
    return p;
  }

  /** Orders [from, from + n) unpaid, and their timeouts of `kind`, due now. */
  async seed(kind: string, from: number, n: number): Promise<void> {
    await this.pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series($1::bigint, $1::bigint + $2 - 1) g`, [from, n]);
    await this.pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $3, g::text, now() FROM generate_series($1::bigint, $1::bigint + $2 - 1) g`,
      [from, n, kind],
    );
  }

  async count(kind: string, state: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = $1 AND state = $2`, [
      kind,
      state,
    ]);
    return rows[0]!.n;
  }

  async waitFor(what: string, test: () => Promise<boolean>, timeoutMs: number, everyMs = 100): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await test())) {
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await sleep(everyMs);
    }
  }

  /** Runs the CLI with only DATABASE_URL (the operator verbs need nothing else). */
  cli(args: string[]): Promise<CliResult> {
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [CLI, ...args],
        { env: { ...process.env, DATABASE_URL: this.db.url, TIMEOUT_CENTER_CONFIG: undefined }, timeout: 30_000 },
        (err, stdout, stderr) => {
          const code = err ? (err as { code?: unknown }).code : 0;
          resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr: err && typeof code !== 'number' ? `${stderr}${String(err)}` : stderr });
        },
      );
    });
  }

  async cliJson<T>(args: string[]): Promise<T> {
    const r = await this.cli([...args, '--json']);
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as T;
  }

  async metrics(): Promise<string> {
    const res = await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`, { signal: AbortSignal.timeout(10_000) });
    return res.text();
  }

  async stop(): Promise<void> {
    for (const p of [...this.procs].reverse()) await p.stop();
    await this.pool.end();
    await this.db.drop();
  }
}

/** Timeouts of `kind` finished in [from, to) (PostgreSQL timestamps in s since the epoch), per second. */
async function rateBetween(pool: pg.Pool, kind: string, from: number, to: number): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM timeout_center.all_timeouts
      WHERE kind = $1 AND state = 'done' AND finished_at >= to_timestamp($2) AND finished_at < to_timestamp($3)`,
    [kind, from, to],
  );
  return rows[0]!.n / (to - from);
}

const epochOf = (d: string | Date) => new Date(d).getTime() / 1000;

/** The sql and sh blocks of the README's flow control section, exactly as written. */
function readmeBlocks(): { sql: string; sh: string[] } {
  const readme = readFileSync(fileURLToPath(new URL('../../README.md', import.meta.url)), 'utf8');
  const start = readme.indexOf('### Pause, resume and limit a kind');
  const section = readme.slice(start, readme.indexOf('\n## ', start));
  const sql = /```sql\n([\s\S]*?)```/.exec(section)![1]!;
  const sh = /```sh\n([\s\S]*?)```/
    .exec(section)![1]!
    .split('\n')
    .filter((l) => l.trim() !== '');
  return { sql, sh };
}

describe('flow control statements, session by session', () => {
  let db: TestDatabase;
  let pool: pg.Pool;

  beforeAll(async () => {
    db = await createTestDatabase('flow_sql');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    const config = writeConfig({ kinds: { 'lock.test': { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    const migrated = await runCli(['migrate', '--config', config], { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL });
    expect(migrated.code, migrated.stderr).toBe(0);
  });

  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  /** Queued shards of lock.test in a fresh scan, unpublished. */
  const queuedShards = async (n: number): Promise<number[]> => {
    const { rows } = await pool.query<{ id: string }>(
      `WITH s AS (INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (0, 'test', now(), 'mapped') RETURNING id)
       INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit) SELECT s.id, 'lock.test', g, 0, 10 FROM s, generate_series(1, $1::int) g
       RETURNING id`,
      [n],
    );
    return rows.map((r) => Number(r.id));
  };

  it('take_lease holds a cap under a race: the second taker waits on lock_kind and then sees the first one running', async () => {
    await pool.query(`UPDATE timeout_center.kinds SET max_running_shards = 1 WHERE kind = 'lock.test'`);
    const [s1, s2] = (await queuedShards(2)) as [number, number];
    const a = await pool.connect();
    const b = await pool.connect();
    try {
      await a.query('BEGIN');
      await a.query(sql('worker/lock_kind', { shardId: s1 }));
      expect((await a.query(sql('worker/take_lease', { shardId: s1, workerId: 'worker-a', leaseMs: 30_000 }))).rowCount).toBe(1);
      // B, on another shard of the kind, before A commits.
      await b.query('BEGIN');
      let bLocked = false;
      const bLock = b.query(sql('worker/lock_kind', { shardId: s2 })).then(() => (bLocked = true));
      await sleep(300);
      expect(bLocked, 'the second taker waits for the first one to commit').toBe(false);
      await a.query('COMMIT');
      await bLock;
      expect((await b.query(sql('worker/take_lease', { shardId: s2, workerId: 'worker-b', leaseMs: 30_000 }))).rowCount, 'refused: 1 running, cap 1').toBe(0);
      await b.query('COMMIT');
      // The refused shard is held: queued, unpublished, and left alone by the reaper while the cap is full.
      expect((await pool.query(sql('worker/hold_shard', { shardId: s2 }))).rows).toEqual([{ id: String(s2), kind: 'lock.test', held: true }]);
      expect((await pool.query(sql('coordinator/republish_queued', { republishAfterMs: 30_000, all: false, maxShards: 100, shardsFrom: 0 }))).rows).toEqual([]);
      // The running one finishes: the held one is published at the next reap.
      await pool.query(`UPDATE timeout_center.shards SET state = 'done', finished_at = now() WHERE id = $1`, [s1]);
      expect(
        (await pool.query(sql('coordinator/republish_queued', { republishAfterMs: 30_000, all: false, maxShards: 100, shardsFrom: 0 }))).rows.map((r) =>
          Number(r.id),
        ),
      ).toEqual([s2]);
    } finally {
      a.release();
      b.release();
    }
  });

  it('a paused kind: take_lease refuses, the shard is held without a write per reap, and published again after resume', async () => {
    await pool.query(`UPDATE timeout_center.kinds SET max_running_shards = NULL, paused = true WHERE kind = 'lock.test'`);
    const [s] = (await queuedShards(1)) as [number];
    // Published once (by the map), then delivered to a worker while paused.
    await pool.query(`UPDATE timeout_center.shards SET published_at = now(), publish_count = 1 WHERE id = $1`, [s]);
    expect((await pool.query(sql('worker/take_lease', { shardId: s, workerId: 'worker-a', leaseMs: 30_000 }))).rowCount).toBe(0);
    expect((await pool.query(sql('worker/hold_shard', { shardId: s }))).rows).toEqual([{ id: String(s), kind: 'lock.test', held: true }]);
    // Even "the channel lost everything" does not publish a held shard, nor write it again.
    const xmin = async () => (await pool.query(`SELECT xmin::text AS x, published_at, publish_count FROM timeout_center.shards WHERE id = $1`, [s])).rows[0];
    const before = await xmin();
    expect((await pool.query(sql('coordinator/republish_queued', { republishAfterMs: 0, all: true, maxShards: 100, shardsFrom: 0 }))).rows).toEqual([]);
    expect(await xmin()).toEqual(before);
    expect(before).toMatchObject({ published_at: null, publish_count: 1 });
    await pool.query(`UPDATE timeout_center.kinds SET paused = false WHERE kind = 'lock.test'`);
    expect(
      (await pool.query(sql('coordinator/republish_queued', { republishAfterMs: 30_000, all: false, maxShards: 100, shardsFrom: 0 }))).rows.map((r) =>
        Number(r.id),
      ),
    ).toContain(s);
    expect((await pool.query(sql('worker/take_lease', { shardId: s, workerId: 'worker-a', leaseMs: 30_000 }))).rowCount).toBe(1);
  });
});

describe.concurrent('flow control per kind, fleet-wide (real processes)', () => {
  let rated: Fleet;
  let capped: Fleet;

  beforeAll(async () => {
    [rated, capped] = await Promise.all([
      Fleet.start(
        'flow_rate',
        {
          'rate.fixed': { shardSize: 500, rateLimit: 1000, handler: { type: 'sql', sql: CLOSE_SQL } },
          'rate.change': { shardSize: 500, rateLimit: 1000, handler: { type: 'sql', sql: CLOSE_SQL } },
        },
        3,
      ),
      Fleet.start(
        'flow_cap',
        {
          'cap.two': { shardSize: 50, maxRunningShards: 2, handler: { type: 'sql', sql: SLOW_CLOSE_SQL } },
          'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } },
          'order.unshipped': { handler: { type: 'sql', sql: CLOSE_SQL } },
          // A cap it never reaches (8 slots) keeps its configured shard size (the map sizes shards
          // to the backlog only for kinds without flow control), so the drain lasts long enough
          // to pause it midway.
          'pause.mid': { shardSize: 20, maxRunningShards: 100, handler: { type: 'sql', sql: SLOW_CLOSE_SQL } },
        },
        4,
        { alerts: { lagSlaMs: 2000, lagAlertEveryMs: 1000 } },
      ),
    ]);
  });

  afterAll(async () => {
    await Promise.all([rated?.stop(), capped?.stop()]);
    const leaked = await killAll();
    expect(leaked, 'processes still running after the test').toEqual([]);
  });

  it('three workers drain 20,000 due timeouts of a kind limited to 1,000/s at 1,000/s ± 5 %, measured at commit', async () => {
    const N = 20_000;
    const kind = 'rate.fixed';
    await rated.seed(kind, 1, N);
    // (b) commit visibility, polled from a session of our own.
    const seen: { t: number; done: number }[] = [];
    await rated.waitFor(
      'the rate-limited kind to drain',
      async () => {
        const { rows } = await rated.pool.query<{ t: number; done: number }>(
          `SELECT extract(epoch FROM statement_timestamp())::float8 AS t, count(*)::int AS done FROM timeout_center.all_timeouts WHERE kind = $1 AND state = 'done'`,
          [kind],
        );
        seen.push(rows[0]!);
        return rows[0]!.done === N;
      },
      60_000,
    );
    // (a) finished_at: rows after the first shard over the time from the first commit to the last.
    const { rows } = await rated.pool.query<{ n: number; first: number; span: number; owners: number; shards: number; max_claim: number }>(
      `WITH d AS (SELECT finished_at FROM timeout_center.all_timeouts WHERE kind = $1 AND state = 'done')
       SELECT (SELECT count(*) FROM d)::int AS n,
              (SELECT count(*) FROM d WHERE finished_at = (SELECT min(finished_at) FROM d))::int AS first,
              (SELECT extract(epoch FROM max(finished_at) - min(finished_at)) FROM d)::float8 AS span,
              (SELECT count(DISTINCT owner) FROM timeout_center.shards WHERE kind = $1)::int AS owners,
              (SELECT count(*) FROM timeout_center.shards WHERE kind = $1)::int AS shards,
              (SELECT max(claim_limit) FROM timeout_center.shards WHERE kind = $1)::int AS max_claim`,
      [kind],
    );
    const r = rows[0]!;
    const byFinishedAt = (r.n - r.first) / r.span;
    const mid = seen.filter((p) => p.done >= N * 0.1 && p.done <= N * 0.9);
    const mt = mid.reduce((a, p) => a + p.t, 0) / mid.length;
    const md = mid.reduce((a, p) => a + p.done, 0) / mid.length;
    const byVisibility = mid.reduce((a, p) => a + (p.t - mt) * (p.done - md), 0) / mid.reduce((a, p) => a + (p.t - mt) ** 2, 0);
    console.log(
      `rate limit 1000/s, ${N} timeouts, ${r.shards} shards (claim limit <= ${r.max_claim}) over ${r.owners} workers: ` +
        `${byFinishedAt.toFixed(1)}/s by finished_at over ${r.span.toFixed(2)} s, ${byVisibility.toFixed(1)}/s by commit visibility (${mid.length} polls)`,
    );
    expect(r.n).toBe(N);
    expect(await rated.metrics()).toMatch(/tc_kind_rate_limit\{kind="rate\.fixed"[^}]*\} 1000\n/);
    expect(r.owners, 'shards ran on several workers: the limit is fleet-wide').toBeGreaterThanOrEqual(2);
    expect(r.max_claim, 'shards of a tenth of a second').toBeLessThanOrEqual(100);
    expect(Math.abs(byFinishedAt - 1000) / 1000).toBeLessThanOrEqual(0.05);
    expect(Math.abs(byVisibility - 1000) / 1000).toBeLessThanOrEqual(0.05);
  });

  it('a change of rate limit mid-drain takes effect within a second (1,000/s -> 250/s -> none)', async () => {
    const kind = 'rate.change';
    // After the 20,000 of the test above, so that each rate is measured on an otherwise quiet fleet.
    await rated.waitFor('the fixed-rate drain to end', async () => (await rated.count('rate.fixed', 'done')) === 20_000, 90_000, 250);
    // Enough that the drain outlasts the CLI's own start-up on a loaded machine (seconds).
    const N = 20_000;
    await rated.seed(kind, 1_000_001, N);
    // 4,000 first: the rate before the change is measured over about 3 s (over the 1.3-1.7 s that
    // 2,000 gave, a shard's worth of rows either side moved it by more than the tolerance).
    await rated.waitFor('4,000 applied at 1,000/s', async () => (await rated.count(kind, 'done')) >= 4000, 30_000);
    const lowered = await rated.cliJson<{ rateLimit: number; changedAt: string; source: string }>(['limit', kind, '--rate', '250', '--actor', 'test']);
    expect(lowered).toMatchObject({ rateLimit: 250, source: 'operator' });
    const t1 = epochOf(lowered.changedAt);
    await sleep(5000);
    const lifted = await rated.cliJson<{ rateLimit: number | null; changedAt: string }>(['limit', kind, '--rate', 'none']);
    expect(lifted.rateLimit).toBeNull();
    const t2 = epochOf(lifted.changedAt);
    await rated.waitFor('the rest to drain once unlimited', async () => (await rated.count(kind, 'done')) === N, 30_000);
    const { rows: start } = await rated.pool.query<{ first: number }>(
      `SELECT extract(epoch FROM min(finished_at))::float8 AS first FROM timeout_center.all_timeouts WHERE kind = $1`,
      [kind],
    );
    // From a second after the first commit (the start) to the change.
    const before = await rateBetween(rated.pool, kind, start[0]!.first + 1, t1);
    const after = await rateBetween(rated.pool, kind, t1 + 1, t2);
    const firstSecond = await rateBetween(rated.pool, kind, t1 + 1, t1 + 2);
    const { rows } = await rated.pool.query<{ last: number; left: number }>(
      `SELECT extract(epoch FROM max(finished_at))::float8 AS last,
              count(*) FILTER (WHERE finished_at >= to_timestamp($2))::int AS left
         FROM timeout_center.all_timeouts WHERE kind = $1`,
      [kind, t2],
    );
    const drainAfterLift = rows[0]!.last - t2;
    const { rows: perSecond } = await rated.pool.query<{ s: number; n: number }>(
      `SELECT floor(extract(epoch FROM finished_at) - $2)::int AS s, count(*)::int AS n FROM timeout_center.all_timeouts
        WHERE kind = $1 GROUP BY 1 ORDER BY 1`,
      [kind, t1],
    );
    console.log(`rate change: done per second from the lowering (t2 at +${(t2 - t1).toFixed(2)} s): ${perSecond.map((p) => `${p.s}:${p.n}`).join(' ')}`);
    console.log(
      `rate change: ${before.toFixed(0)}/s over the ${(t1 - start[0]!.first - 1).toFixed(1)} s before lowering to 250/s; ${after.toFixed(0)}/s from 1 s after it to the next change ` +
        `(${firstSecond.toFixed(0)}/s in its first second); the ${rows[0]!.left} left drained ${drainAfterLift.toFixed(2)} s after the limit was lifted`,
    );
    expect(Math.abs(before - 1000) / 1000).toBeLessThanOrEqual(0.15);
    expect(Math.abs(after - 250) / 250).toBeLessThanOrEqual(0.15);
    expect(firstSecond).toBeLessThanOrEqual(250 * 1.2);
    // Unlimited, thousands drain in about a second (at 250/s they would take many).
    expect(rows[0]!.left).toBeGreaterThan(1000);
    expect(drainAfterLift).toBeLessThan(rows[0]!.left / 250 / 3);
  });

  it('a kind capped at 2 running shards never shows more than 2 running in shard_report while 4 workers idle; a lowered cap holds within a second', async () => {
    const kind = 'cap.two';
    const N = 6_000; // 120 shards of 50, 200 ms each: 12 s at 2 running
    const running: { at: number; n: number }[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const { rows } = await capped.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM timeout_center.shard_report WHERE kind = $1 AND state = 'running'`,
          [kind],
        );
        running.push({ at: Date.now(), n: rows[0]!.n });
        await sleep(15);
      }
    })();
    let beforeLower: number, loweredAt: number, liftedAt: number;
    try {
      await capped.seed(kind, 2_000_001, N);
      await capped.waitFor('1,000 applied at 2 shards at once', async () => (await capped.count(kind, 'done')) >= 1000, 30_000);
      beforeLower = running.length;
      await capped.cliJson(['limit', kind, '--max-running-shards', '1', '--actor', 'test']);
      loweredAt = Date.now(); // the change committed before this
      await sleep(3000);
      liftedAt = Date.now(); // the change commits after this
      await capped.cliJson(['limit', kind, '--max-running-shards', 'none']);
      await capped.waitFor('the capped kind to drain', async () => (await capped.count(kind, 'done')) === N, 60_000);
    } finally {
      polling = false;
      await poller;
    }
    const atCap2 = running.slice(0, beforeLower);
    const atCap1 = running.filter((p) => p.at >= loweredAt + 1000 && p.at < liftedAt);
    const max = (ps: { n: number }[]) => Math.max(...ps.map((p) => p.n));
    const { rows: workers } = await capped.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.workers WHERE stopped_at IS NULL`);
    const { rows: held } = await capped.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = $1 AND state <> 'done'`, [
      kind,
    ]);
    console.log(
      `cap: max running ${max(atCap2)} over ${atCap2.length} polls at cap 2, ${max(atCap1)} over ${atCap1.length} polls from 1 s after lowering to 1; ` +
        `${workers[0]!.n} workers with 2 slots each`,
    );
    expect(workers[0]!.n).toBe(4);
    expect(max(atCap2)).toBe(2); // the cap is reached (8 slots could run more), never passed
    expect(atCap1.length).toBeGreaterThan(20);
    expect(max(atCap1)).toBe(1); // still draining, one shard at a time
    expect(held[0]!.n).toBe(0);
  });

  it("a paused kind's 5,000 due timeouts stay pending for 10 s while another kind drains, reported as paused; they drain after resume", async () => {
    const { sql, sh } = readmeBlocks();
    // The README's SQL, as written: pauses order.unpaid as alice.
    await capped.pool.query(sql);
    const controls = await capped.pool.query(`SELECT paused, controls_changed_by FROM timeout_center.kind_controls WHERE kind = 'order.unpaid'`);
    expect(controls.rows[0]).toEqual({ paused: true, controls_changed_by: 'alice' });
    // A run-time change survives a restart: process starts (and migrate) write the config's values
    // only while the kind's controls come from the config.
    const remigrated = await runCli(['migrate'], capped.env);
    expect(remigrated.code, remigrated.stderr).toBe(0);
    expect((await capped.pool.query(`SELECT paused FROM timeout_center.kinds WHERE kind = 'order.unpaid'`)).rows[0].paused).toBe(true);

    await capped.seed('order.unpaid', 3_000_001, 5000);
    await capped.seed('order.unshipped', 4_000_001, 5000);
    const pausedAt = Date.now();
    let otherDrainedAfterMs: number | undefined;
    while (Date.now() - pausedAt < 10_000) {
      const { rows } = await capped.pool.query<{ pending: number; other_done: number; shards: number }>(
        `SELECT (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND state = 'pending')::int AS pending,
                (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = 'order.unshipped' AND state = 'done')::int AS other_done,
                (SELECT count(*) FROM timeout_center.shards WHERE kind = 'order.unpaid')::int AS shards`,
      );
      expect(rows[0]).toMatchObject({ pending: 5000, shards: 0 });
      if (rows[0]!.other_done === 5000) otherDrainedAfterMs ??= Date.now() - pausedAt;
      await sleep(200);
    }
    expect(otherDrainedAfterMs, 'the other kind drained while this one was paused').toBeDefined();

    // Still reported, marked paused: the backlog view, status, the gauge and the lag alert.
    const backlog = await capped.pool.query(`SELECT pending_due::int, paused FROM timeout_center.backlog WHERE kind = 'order.unpaid'`);
    expect(backlog.rows[0]).toEqual({ pending_due: 5000, paused: true });
    const status = await capped.cliJson<{
      backlog: { kind: string; pendingDue: number; paused: boolean }[];
      kinds: { kind: string; paused: boolean; changedBy: string | null; source: string }[];
    }>(['status']);
    expect(status.backlog.find((b) => b.kind === 'order.unpaid')).toMatchObject({ pendingDue: 5000, paused: true });
    expect(status.kinds.find((k) => k.kind === 'order.unpaid')).toMatchObject({ paused: true, changedBy: 'alice', source: 'operator' });
    const text = (await capped.cli(['status'])).stdout;
    expect(text).toMatch(/order\.unpaid +5000 .* PAUSED/);
    expect(text).toMatch(/order\.unpaid: PAUSED, .*changed by alice at/);
    const metrics = await capped.metrics();
    expect(metrics).toMatch(/tc_kind_paused\{kind="order\.unpaid"[^}]*\} 1/);
    expect(metrics).toMatch(/tc_kind_paused\{kind="order\.unshipped"[^}]*\} 0/);
    const alert = await capped.coordinator.waitFor((l) => l['alert'] === 'lag_sla' && l['kind'] === 'order.unpaid', 10_000, 'lag alert');
    expect(alert['paused']).toBe(true);
    expect(String(alert.msg)).toMatch(/PAUSED/);

    // The README's shell commands, as written: resume, limit, lift, reset to the config.
    for (const line of sh) {
      const args = line.replace(/^timeout-center /, '').split(/\s+/);
      const r = await capped.cli(args);
      expect(r.code, `${line}: ${r.stderr}`).toBe(0);
    }
    const after = await capped.pool.query(
      `SELECT paused, max_running_shards, rate_limit, controls_source FROM timeout_center.kinds WHERE kind = 'order.unpaid'`,
    );
    expect(after.rows[0]).toEqual({ paused: false, max_running_shards: null, rate_limit: null, controls_source: 'config' });
    const resumedAt = Date.now();
    await capped.waitFor('the resumed kind to drain', async () => (await capped.count('order.unpaid', 'done')) === 5000, 30_000);
    console.log(`pause: order.unshipped drained ${otherDrainedAfterMs} ms into the pause; order.unpaid drained ${Date.now() - resumedAt} ms after the reset`);
    const audit = await capped.pool.query<{ actor: string; action: string }>(
      `SELECT actor, action FROM timeout_center.audit_log WHERE kind = 'order.unpaid' ORDER BY id`,
    );
    expect(audit.rows.map((a) => a.action)).toEqual(['pause', 'resume', 'limit', 'limit', 'limit']);
    expect(audit.rows.slice(0, 2).map((a) => a.actor)).toEqual(['alice', 'alice']);
  });

  it('paused mid-drain: running shards finish, nothing starts, queued shards wait without bouncing; resume drains the rest', async () => {
    const kind = 'pause.mid';
    const N = 8_000; // 400 shards of 20, 200 ms each, 8 slots: about 10 s unpaused
    await capped.seed(kind, 5_000_001, N);
    await capped.waitFor('some applied', async () => (await capped.count(kind, 'done')) >= 200, 30_000, 50);
    await capped.cliJson(['pause', kind, '--actor', 'test']);
    // The shards running at the pause finish (200 ms each); then nothing moves.
    await sleep(1000);
    const frozen = async () =>
      (
        await capped.pool.query<{ done: number; running: number; queued: number; publishes: number }>(
          `SELECT (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = $1 AND state = 'done')::int AS done,
                  count(*) FILTER (WHERE state = 'running')::int AS running,
                  count(*) FILTER (WHERE state = 'queued')::int AS queued,
                  coalesce(sum(publish_count), 0)::int AS publishes
             FROM timeout_center.shards WHERE kind = $1`,
          [kind],
        )
      ).rows[0]!;
    const at = await frozen();
    await sleep(3000);
    const later = await frozen();
    console.log(
      `pause mid-drain: ${at.done} done at the pause + 1 s, ${at.queued} shards queued; 3 s later ${later.done} done, publishes ${at.publishes} -> ${later.publishes}`,
    );
    expect(at.running).toBe(0);
    expect(at.done).toBeLessThan(N);
    expect(later).toEqual(at); // nothing started, nothing republished
    await capped.cliJson(['resume', kind, '--actor', 'test']);
    await capped.waitFor('the resumed kind to drain', async () => (await capped.count(kind, 'done')) === N, 30_000);
    const { rows } = await capped.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = $1 AND state <> 'done'`, [kind]);
    expect(rows[0]!.n).toBe(0);
  });

  it('bad input changes nothing and says what is wrong', async () => {
    const snapshot = async () =>
      (
        await rated.pool.query(
          `SELECT k.*, (SELECT count(*) FROM timeout_center.audit_log a WHERE a.kind = k.kind)::int AS audited FROM timeout_center.kinds k WHERE kind = 'rate.fixed'`,
        )
      ).rows;
    const before = await snapshot();
    const cases: [string[], RegExp][] = [
      [['pause', 'order.nope'], /unknown kind "order\.nope"; known kinds: rate\.change, rate\.fixed/],
      [['limit', 'rate.fixed', '--rate', '0'], /rate limit must be a number of timeouts per second above 0/],
      [['limit', 'rate.fixed', '--rate', 'fast'], /--rate must be a number above 0, or none/],
      [['limit', 'rate.fixed', '--max-running-shards', '1.5'], /--max-running-shards must be a whole number/],
      [['limit', 'rate.fixed', '--max-running-shards', '0'], /max running shards must be a whole number from 1 to 100000/],
      [['limit', 'rate.fixed'], /nothing to change/],
      [['limit', 'rate.fixed', '--reset', '--rate', '5'], /--reset .* alone/],
      [['resume', 'rate.fixed', '--actor', ' '], /actor must be 1 to 200 characters/],
    ];
    for (const [args, message] of cases) {
      const r = await rated.cli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(message);
    }
    expect(await snapshot()).toEqual(before);
  });
});
