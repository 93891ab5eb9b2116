// The history partitioned by day (sql/0050, 0051; docs/vacuum-horizon.md "Rotate instead of
// deleting"):
//   - the conversion runs online: a schema of the previous release holding history, writers
//     inserting into timeout_center.done_timeouts all through the migrate, none of them refused,
//     every row there afterwards, the views reading the parent;
//   - retention drops the days wholly older than doneAfterMs, partitions and all, without a
//     DELETE: the older rows are gone, the newer ones kept, the partitions of the next days made;
//   - the rows of the table from before the conversion are deleted by batch until it has wholly
//     aged out, then it is dropped.
import { cpSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS_DIR } from '../../src/db/migrate.js';
import { HISTORY_DAYS_AHEAD, purge, type PurgeResult } from '../../src/retention/retention.js';
import { tearDown } from '../helpers/teardown.js';
import { createTestDatabase, type TestDatabase } from '../helpers/services.js';

const DAY = 86_400_000;
const quiet = pino({ level: 'silent' });

/** A copy of sql/ holding the migrations below `below` only: the previous release's schema. */
function migrationsBelow(below: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'tc-migrations-'));
  for (const f of readdirSync(MIGRATIONS_DIR)) {
    if (/^\d{4}_/.test(f) && Number(f.slice(0, 4)) < below) cpSync(join(MIGRATIONS_DIR, f), join(dir, f));
  }
  return dir;
}

/** n history rows finished from ageMs ago on, one a ms apart spread over spanMs (as workers write them). */
async function loadHistory(pool: pg.Pool, n: number, ageMs: number, spanMs: number, firstId: number): Promise<void> {
  await pool.query(
    `INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, attempts, result, created_at, finished_at)
     SELECT $4::int8 + g, 'order.unpaid', ($4::int8 + g)::text, now() - $2 * interval '1 ms', 1, 'applied', now() - $2 * interval '1 ms',
            now() - $2 * interval '1 ms' + (g::float8 / $1 * $3) * interval '1 ms'
       FROM generate_series(1, $1::int) g`,
    [n, ageMs, spanMs, firstId],
  );
}

const partitions = async (pool: pg.Pool): Promise<string[]> =>
  (
    await pool.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'timeout_center.done_timeouts'::regclass ORDER BY 1`,
    )
  ).rows.map((r) => r.name);

describe('the history partitioned by day', () => {
  let db: TestDatabase;
  let pool: pg.Pool;

  beforeAll(async () => {
    db = await createTestDatabase('history_parts', { empty: true });
    pool = new pg.Pool({ connectionString: db.url, max: 6 });
  });
  afterAll(() => tearDown({ pool, db }));

  it('is converted online: inserts go on through the migrate, none refused, every row kept', async () => {
    await migrate(pool, quiet, migrationsBelow(50));
    await loadHistory(pool, 100_000, 10 * DAY, 10 * DAY - 60_000, 0);
    await pool.query('VACUUM ANALYZE timeout_center.done_timeouts');

    // Writers as the previous release's: plain INSERTs into timeout_center.done_timeouts, one
    // statement per 100 rows, back to back until the migrate is over.
    let inserted = 0;
    let refused = 0;
    let running = true;
    const writer = (async () => {
      let id = 10_000_000;
      while (running) {
        try {
          const r = await pool.query(
            `INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, attempts, result, created_at, finished_at)
             SELECT $1::int8 + g, 'order.unpaid', ($1::int8 + g)::text, now(), 1, 'applied', now(), clock_timestamp()
               FROM generate_series(1, 100) g`,
            [id],
          );
          inserted += r.rowCount ?? 0;
        } catch (err) {
          refused += 1;
          console.log(`insert refused during the migrate: ${(err as Error).message}`);
        }
        id += 100;
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    const before = inserted;
    const result = await migrate(pool, quiet);
    const during = inserted - before;
    await new Promise((r) => setTimeout(r, 300));
    running = false;
    await writer;

    expect(result.applied).toEqual(expect.arrayContaining(['0050_history_partitions', '0051_history_partitioned']));
    expect(refused).toBe(0);
    expect(during).toBeGreaterThan(0);
    const { rows } = await pool.query(`SELECT relkind FROM pg_class WHERE oid = 'timeout_center.done_timeouts'::regclass`);
    expect(rows[0].relkind).toBe('p');
    const count = async (q: string) => Number((await pool.query(q)).rows[0].n);
    expect(await count(`SELECT count(*) AS n FROM timeout_center.done_timeouts`)).toBe(100_000 + inserted);
    // The view reads the parent, not the renamed table.
    expect(await count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'done'`)).toBe(100_000 + inserted);
    const parts = await partitions(pool);
    const old = parts.find((p) => p.startsWith('done_timeouts_before_'));
    expect(old).toBeDefined();
    expect(parts).toContain('done_timeouts_default');
    expect(parts.filter((p) => /^done_timeouts_\d{8}$/.test(p))).toHaveLength(3);
    // Every row is in the old table (all finished before X, a day or more ahead).
    expect(await count(`SELECT count(*) AS n FROM timeout_center.${old}`)).toBe(100_000 + inserted);
    // The ids stay unique per partition, as they were in one table: a second row of an id is refused there.
    await expect(
      pool.query(
        `INSERT INTO timeout_center.done_timeouts (id, kind, biz_id, due_at, attempts, result, created_at, finished_at)
         VALUES (1, 'order.unpaid', '1', now(), 1, 'applied', now(), now())`,
      ),
    ).rejects.toThrow(/duplicate key/);
    // A second migrate has nothing to do.
    expect((await migrate(pool, quiet)).applied).toEqual([]);
    console.log(`history partitioned online: ${during} rows inserted during the migrate, 0 refused; partitions: ${parts.join(', ')}`);
  });

  it('retention deletes the old table by batch while it has newer rows, creates the days ahead', async () => {
    // The bound, read before the purge: the purge's own (now() - 3 days when it runs) is at or after
    // it. Counted against now() after the purge, a row that finished in the seconds the purge took
    // (one every 8.6 s here) would be older than three days by then and left, rightly.
    const { rows: bound } = await pool.query<{ at: string }>(`SELECT (now() - interval '3 days')::text AS at`);
    const r = await purge(pool, { doneAfterMs: 3 * DAY, scansAfterMs: 3 * DAY, batchSize: 5000, scanBatchSize: 1000 });
    // 100,000 rows over 10 days: the 7 oldest days' worth, about 70,000, deleted by batch.
    expect(r.timeouts).toBeGreaterThan(68_000);
    expect(r.timeouts).toBeLessThan(72_000);
    expect(r.partitionsDropped).toBe(0);
    const left = Number(
      (await pool.query(`SELECT count(*) AS n FROM timeout_center.done_timeouts WHERE finished_at < $1::timestamptz`, [bound[0]!.at])).rows[0].n,
    );
    expect(left).toBe(0);
  });

  it('retention drops the days wholly older than doneAfterMs, without deleting a row, and keeps the newer ones', async () => {
    // Some days after the conversion: the old table has aged out (dropped, as retention does)
    // and the past days have their own partitions.
    const old = (await partitions(pool)).find((p) => p.startsWith('done_timeouts_before_'))!;
    await pool.query(`ALTER TABLE timeout_center.done_timeouts DETACH PARTITION timeout_center.${old}`);
    await pool.query(`DROP TABLE timeout_center.${old}`);
    await pool.query(`SELECT timeout_center.add_history_partition(((now() AT TIME ZONE 'UTC')::date - d)) FROM generate_series(0, 10) d`);
    await pool.query(`TRUNCATE timeout_center.done_timeouts`);
    // 10 days of history, 20,000 rows a day, up to a minute ago.
    await loadHistory(pool, 200_000, 10 * DAY, 10 * DAY - 60_000, 20_000_000);
    await pool.query('VACUUM ANALYZE timeout_center.done_timeouts');
    const keepFrom = Date.now() - 3 * DAY;
    // The day boundary at or before the cutoff: what is older goes, partition by partition.
    const dayStart = (t: number) => Math.floor(t / DAY) * DAY;
    const { rows: expected } = await pool.query<{ gone: string; kept: string }>(
      `SELECT count(*) FILTER (WHERE finished_at < to_timestamp($1 / 1000.0))::int8 AS gone,
              count(*) FILTER (WHERE finished_at >= to_timestamp($1 / 1000.0))::int8 AS kept
         FROM timeout_center.done_timeouts`,
      [dayStart(keepFrom)],
    );
    const dropped: string[] = [];
    const r: PurgeResult = await purge(
      pool,
      { doneAfterMs: 3 * DAY, scansAfterMs: 3 * DAY, batchSize: 5000, scanBatchSize: 1000 },
      { onPartition: (action, name) => action === 'dropped' && dropped.push(name) },
    );
    expect(r.timeouts).toBe(0); // no row deleted: whole partitions dropped
    expect(r.partitionsSkipped).toBe(0);
    expect(r.partitionsDropped).toBe(dropped.length);
    expect(dropped.length).toBeGreaterThanOrEqual(7);
    expect(Math.abs(r.droppedRows - Number(expected[0]!.gone))).toBeLessThan(Number(expected[0]!.gone) * 0.05);
    const { rows } = await pool.query<{ oldest: Date; n: string }>(`SELECT min(finished_at) AS oldest, count(*)::int8 AS n FROM timeout_center.done_timeouts`);
    expect(Number(rows[0]!.n)).toBe(Number(expected[0]!.kept));
    expect(rows[0]!.oldest.getTime()).toBeGreaterThanOrEqual(dayStart(keepFrom));
    // Rows of the day the cutoff falls in stay until that whole day is older than doneAfterMs.
    expect(rows[0]!.oldest.getTime()).toBeLessThan(keepFrom);
    // The days ahead exist; the dead rows of a DELETE do not.
    const parts = await partitions(pool);
    for (let d = 0; d <= HISTORY_DAYS_AHEAD; d += 1) {
      const day = new Date(dayStart(Date.now()) + d * DAY).toISOString().slice(0, 10).replaceAll('-', '');
      expect(parts).toContain(`done_timeouts_${day}`);
    }
    const { rows: dead } = await pool.query(
      `SELECT coalesce(sum(n_tup_del), 0)::int8 AS n FROM pg_stat_user_tables WHERE schemaname = 'timeout_center' AND relname LIKE 'done\\_timeouts\\_%'`,
    );
    expect(Number(dead[0].n)).toBe(0);
    // A second run finds nothing to do.
    const again = await purge(pool, { doneAfterMs: 3 * DAY, scansAfterMs: 3 * DAY, batchSize: 5000, scanBatchSize: 1000 });
    expect(again.partitionsDropped + again.partitionsCreated + again.timeouts).toBe(0);
    console.log(`retention dropped ${dropped.length} partitions (~${r.droppedRows} rows) in ${r.ms} ms: ${dropped.join(', ')}`);
  });

  it('a drop that cannot take its lock is left to the next run, without waiting', async () => {
    // A day's partition made again, with rows at its noon (UTC).
    const noon = Math.floor(Date.now() / DAY) * DAY - 5 * DAY + DAY / 2;
    await pool.query(`SELECT timeout_center.add_history_partition((to_timestamp($1 / 1000.0) AT TIME ZONE 'UTC')::date)`, [noon]);
    await loadHistory(pool, 1000, Date.now() - noon, 60_000, 40_000_000);
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT count(*) FROM timeout_center.done_timeouts');
      const started = Date.now();
      const r = await purge(pool, { doneAfterMs: 3 * DAY, scansAfterMs: 3 * DAY, batchSize: 5000, scanBatchSize: 1000 });
      expect(r.partitionsSkipped).toBeGreaterThan(0);
      expect(r.partitionsDropped).toBe(0);
      expect(r.timeouts).toBe(0);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const r = await purge(pool, { doneAfterMs: 3 * DAY, scansAfterMs: 3 * DAY, batchSize: 5000, scanBatchSize: 1000 });
    expect(r.partitionsDropped).toBe(1);
    expect(Number((await pool.query(`SELECT count(*) AS n FROM timeout_center.done_timeouts WHERE finished_at < now() - interval '4 days'`)).rows[0].n)).toBe(
      0,
    );
  });
});
