// Retention: 200,000 finished timeouts and a few thousand scans, purged by `timeout-center purge`
// in batches; failed timeouts, recent rows and scans that still explain failed timeouts are kept.
// Measures the table size before, after the purge, after VACUUM and after refilling with as many
// new rows: DELETE + (auto)vacuum keeps the size steady (the space is reused), it does not shrink
// the file. Then the leading coordinator purges on its own (retention.intervalMs).
import { execFile } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { CLI, runCli, spawnCli } from '../helpers/processes.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const DAY = 86_400_000;
const OLD_DONE = 150_000; // in done_timeouts, as workers write them (sql/0010)
const OLD_DONE_LEGACY = 10_000; // of those, done rows in timeouts, written before sql/0010
const OLD_CANCELLED = 40_000;
const RECENT_DONE = 5_000;
const OLD_FAILED = 5_000; // 200,000 finished rows in all
const OLD_SCANS = 2_000; // reduced 10 days ago, 5 shards each
const RECENT_SCANS = 10;

describe('retention', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let env: Record<string, string>;
  let configPath: string;

  // Summed over the partitions of a partitioned table (the history, sql/0051): its parent holds nothing
  // (pg_partition_tree lists no row for a plain table).
  const size = async (rel: string) =>
    Number(
      (
        await pool.query(`SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1)), pg_total_relation_size($1))::int8 AS b`, [
          rel,
        ])
      ).rows[0].b,
    );
  const count = async (sql: string) => Number((await pool.query(sql)).rows[0].n);
  const heap = async (rel: string) =>
    Number(
      (await pool.query(`SELECT coalesce((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree($1)), pg_relation_size($1))::int8 AS b`, [rel])).rows[0].b,
    );
  const mb = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MB`;

  beforeAll(async () => {
    db = await createTestDatabase('retention');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix('retention'),
      kinds: { 'order.unpaid': { handler: { type: 'sql', sql: CLOSE_SQL } } },
      coordinator: { lockTtlMs: 3000 },
      retention: { intervalMs: 500, doneAfterMs: DAY, scansAfterMs: DAY, batchSize: 2000 },
    });
    env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
  });

  afterAll(() => tearDown({ pool, db }));

  /** Loads finished rows directly (the insert trigger only admits pending rows; a fixture may
   *  bypass it with session_replication_role, which only a superuser can set). */
  async function loadFinished(
    state: 'done' | 'cancelled' | 'failed',
    n: number,
    ageMs: number,
    firstBizId: number,
    shardId: number | null = null,
    legacy = false,
  ) {
    if (state === 'done' && !legacy) {
      await pool.query(
        `INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, attempts, shard_id, result, created_at, finished_at)
         SELECT nextval(pg_get_serial_sequence('timeout_center.timeouts', 'id')), 'order.unpaid', ($2::int8 + g)::text,
                now() - $3 * interval '1 ms', 1, $4::int8, 'applied', now() - $3 * interval '1 ms',
                now() - $3 * interval '1 ms' + (g % 1000) * interval '1 ms'
           FROM generate_series(1, $1::int) g`,
        [n, firstBizId, ageMs, shardId],
      );
      return;
    }
    const client = await pool.connect();
    try {
      await client.query(`SET session_replication_role = replica`);
      await client.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, available_at, state, result, attempts, shard_id, finished_at, last_error)
         SELECT 'order.unpaid', ($2::int8 + g)::text, now() - $3 * interval '1 ms', now() - $3 * interval '1 ms', $1::text,
                CASE $1::text WHEN 'done' THEN 'applied' END, 1, $5::int8,
                now() - $3 * interval '1 ms' + (g % 1000) * interval '1 ms', CASE $1::text WHEN 'failed' THEN 'boom' END
           FROM generate_series(1, $4::int) g`,
        [state, firstBizId, ageMs, n, shardId],
      );
    } finally {
      await client.query(`RESET session_replication_role`).catch(() => {});
      client.release();
    }
  }

  async function loadScans(n: number, ageMs: number, failed = 0): Promise<number[]> {
    const { rows } = await pool.query(
      `INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, claimed, shard_count, done, skipped, failed, retried, started_at, mapped_at, reduced_at)
       SELECT 1, 'test', now() - $2 * interval '1 ms', 'reduced', 2500, 5, 2500 - $3::int, 0, $3::int, 0,
              now() - $2 * interval '1 ms', now() - $2 * interval '1 ms', now() - $2 * interval '1 ms'
         FROM generate_series(1, $1::int) RETURNING id`,
      [n, ageMs, failed],
    );
    const ids = rows.map((r) => Number(r.id));
    await pool.query(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state, attempts, done_count, skipped_count, failed_count, retried_count, finished_at)
       SELECT s, 'order.unpaid', q, 500, 500, 'done', 1, 500, 0, 0, 0, now() - $2 * interval '1 ms'
         FROM unnest($1::int8[]) s, generate_series(0, 4) q`,
      [ids, ageMs],
    );
    return ids;
  }

  it('purges 190k old done/cancelled timeouts and 2k old scans in batches; keeps failed, recent and explained scans; the space is reused', async () => {
    await loadFinished('done', OLD_DONE - OLD_DONE_LEGACY, 10 * DAY, 0);
    await loadFinished('done', OLD_DONE_LEGACY, 10 * DAY, 500_000, null, true);
    await loadFinished('cancelled', OLD_CANCELLED, 10 * DAY, 1_000_000);
    await loadFinished('done', RECENT_DONE, 3_600_000, 2_000_000);
    await loadScans(OLD_SCANS, 10 * DAY);
    await loadScans(RECENT_SCANS, 3_600_000);
    // An old scan with failed timeouts still there: kept. One whose failed timeouts were retried
    // (none left): purged.
    const [keptScan] = await loadScans(1, 10 * DAY, 1);
    const [explainedAway] = await loadScans(1, 10 * DAY, 1);
    const { rows: keptShard } = await pool.query(`SELECT min(id)::int8 AS id FROM timeout_center.shards WHERE scan_id = $1`, [keptScan]);
    await loadFinished('failed', OLD_FAILED, 10 * DAY, 3_000_000, Number(keptShard[0].id));
    await pool.query(`VACUUM ANALYZE timeout_center.timeouts, timeout_center.done_timeouts, timeout_center.scans, timeout_center.shards`);

    // The purge walks the partial index, not the table.
    const plan = (
      await pool.query(
        `EXPLAIN SELECT id FROM timeout_center.timeouts WHERE state IN ('done', 'cancelled') AND finished_at < now() - interval '7 days' ORDER BY finished_at LIMIT 5000 FOR UPDATE SKIP LOCKED`,
      )
    ).rows
      .map((r) => r['QUERY PLAN'])
      .join('\n');
    expect(plan).toMatch(/timeouts_purgeable/);

    const tables = async (f: (rel: string) => Promise<number>) => (await f('timeout_center.timeouts')) + (await f('timeout_center.done_timeouts'));
    const before = {
      heap: await tables(heap),
      timeouts: await tables(size),
      shards: await size('timeout_center.shards'),
      rows: await count(`SELECT count(*) AS n FROM timeout_center.all_timeouts`),
    };
    expect(before.rows).toBe(OLD_DONE + OLD_CANCELLED + RECENT_DONE + OLD_FAILED);

    const dry = await runRaw(['purge', '--done-after', '7d', '--scans-after', '7d', '--dry-run', '--json'], { DATABASE_URL: db.url });
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout).wouldDelete).toEqual({ timeouts: OLD_DONE + OLD_CANCELLED, scans: OLD_SCANS + 1 });
    expect(await count(`SELECT count(*) AS n FROM timeout_center.all_timeouts`)).toBe(before.rows);

    // Only DATABASE_URL: no config file, no Redis.
    const r = await runRaw(['purge', '--done-after', '7d', '--scans-after', '7d', '--batch-size', '5000', '--json'], { DATABASE_URL: db.url });
    expect(r.code, r.stderr).toBe(0);
    const { deleted } = JSON.parse(r.stdout) as { deleted: { timeouts: number; scans: number; batches: number; ms: number } };
    expect(deleted.timeouts).toBe(OLD_DONE + OLD_CANCELLED);
    expect(deleted.scans).toBe(OLD_SCANS + 1);
    expect(deleted.batches).toBeGreaterThanOrEqual(Math.ceil((OLD_DONE + OLD_CANCELLED) / 5000));

    // What is left: recent done, every failed one, recent scans, the scan that explains failures.
    const { rows: left } = await pool.query(`SELECT state, count(*)::int AS n FROM timeout_center.all_timeouts GROUP BY state ORDER BY state`);
    expect(left).toEqual([
      { state: 'done', n: RECENT_DONE },
      { state: 'failed', n: OLD_FAILED },
    ]);
    const { rows: scansLeft } = await pool.query(`SELECT id::int8 AS id FROM timeout_center.scans ORDER BY id`);
    expect(scansLeft).toHaveLength(RECENT_SCANS + 1);
    expect(scansLeft.map((s) => Number(s.id))).toContain(keptScan);
    expect(scansLeft.map((s) => Number(s.id))).not.toContain(explainedAway);
    expect(await count(`SELECT count(*) AS n FROM timeout_center.shards`)).toBe((RECENT_SCANS + 1) * 5);
    // failed still shows the kept scan's failures with their scan.
    const failedView = await count(`SELECT count(*) AS n FROM timeout_center.failed_timeouts WHERE scan_id = ${keptScan}`);
    expect(failedView).toBe(OLD_FAILED);

    const afterPurge = await tables(size);
    await pool.query(`VACUUM timeout_center.timeouts, timeout_center.done_timeouts`);
    const afterVacuum = await tables(size);
    // A day's worth of new rows again: they go into the space the purge freed.
    await loadFinished('done', OLD_DONE - OLD_DONE_LEGACY, 60_000, 5_000_000);
    await loadFinished('cancelled', OLD_CANCELLED + OLD_DONE_LEGACY, 60_000, 6_000_000);
    await pool.query(`VACUUM ANALYZE timeout_center.timeouts, timeout_center.done_timeouts`);
    const afterRefill = await tables(size);
    const heapAfterRefill = await tables(heap);
    const rate = Math.round((deleted.timeouts / deleted.ms) * 1000);
    console.log(
      `retention figures: ${before.rows} finished timeouts (${OLD_DONE + OLD_CANCELLED} purgeable), ${OLD_SCANS + RECENT_SCANS + 2} scans / ` +
        `${(OLD_SCANS + RECENT_SCANS + 2) * 5} shards; purge deleted ${deleted.timeouts} timeouts + ${deleted.scans} scans in ${deleted.batches} batches, ` +
        `${deleted.ms} ms (${rate} timeouts/s). timeouts + done_timeouts tables and indexes: before ${mb(before.timeouts)}, after purge ${mb(afterPurge)}, ` +
        `after VACUUM ${mb(afterVacuum)}, after inserting ${OLD_DONE + OLD_CANCELLED} new rows + VACUUM ${mb(afterRefill)}; ` +
        `(heap alone ${mb(before.heap)} before, ${mb(heapAfterRefill)} after the refill); shards before ${mb(before.shards)}`,
    );
    // DELETE does not give the file back...
    expect(afterPurge).toBeGreaterThan(before.timeouts * 0.8);
    // ...but the same number of new rows fits in the freed space: the table does not grow by
    // another 190k rows' worth (it would almost double without reuse).
    expect(afterRefill).toBeLessThan(before.timeouts * 1.25);
    // Far above "millions a day" (1M/day is 12/s), with room for a loaded CI machine.
    expect(rate).toBeGreaterThan(2_000);
  });

  it('the leading coordinator purges on its own every retention.intervalMs', async () => {
    await loadFinished('done', 3000, 2 * DAY, 7_000_000);
    await loadFinished('cancelled', 1000, 2 * DAY, 8_000_000);
    await loadScans(20, 2 * DAY);
    const coordinator = spawnCli('coordinator', ['coordinator', '--port', '0'], env);
    try {
      await coordinator.waitForMsg('became leader', 20_000);
      const line = await coordinator.waitForMsg('retention purged old rows', 20_000);
      const { rows } = await pool.query(
        `SELECT (SELECT count(*) FROM timeout_center.all_timeouts WHERE biz_id::int8 >= 7000000 AND biz_id::int8 < 9000000)::int AS old,
                (SELECT count(*) FROM timeout_center.scans WHERE reduced_at < now() - interval '1 day')::int AS old_scans,
                (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed')::int AS failed`,
      );
      // The one old scan left is the one whose failed timeouts remain.
      expect(rows[0]).toEqual({ old: 0, old_scans: 1, failed: OLD_FAILED });
      expect(Number(line['timeouts']) + Number(line['scans'])).toBeGreaterThan(0);
      // The purge shows in the coordinator's metrics.
      const portLine = await coordinator.waitForMsg('serving /metrics, /healthz, /readyz');
      const metrics = await (await fetch(`http://127.0.0.1:${String(portLine['port'])}/metrics`)).text();
      const purged = Number(/tc_purged_total\{[^}]*table="timeouts"[^}]*\} (\d+)/.exec(metrics)?.[1] ?? 0);
      expect(purged).toBe(4000);
    } finally {
      const stopped = await coordinator.stop();
      expect(stopped.code).toBe(0);
    }
  });
});

function runRaw(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'] ?? '', ...env }, timeout: 120_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}
