// The coordinator's bounds across a failover that lost commits (claim-floors.ts): the claim floors,
// the oldest shard in flight and the oldest scan not reduced are carried from tick to tick, and
// each holds only on the server that computed it. An asynchronous standby promoted without the
// primary's last commits has rows pending again, and scans not reduced, below the bounds computed
// on the old primary. The pool's idle sessions to the dead primary are dropped quietly and the
// next tick reaches the new primary without an error, so a failed tick cannot be what tells: the
// next tick itself must see that it reads another server, and read from the start.
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ClaimFloors, type FloorsRow } from '../../src/coordinator/claim-floors.js';
import { nextDueStatement } from '../../src/coordinator/map.js';
import { createPool } from '../../src/db/pool.js';
import { createOrdersSchema, CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { runCli } from '../helpers/processes.js';
import { TEST_REDIS_URL } from '../helpers/services.js';
import { startPostgres, startStandby, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { waitUntil } from './harness.js';

const KIND = 'order.unpaid';
const silent = pino({ level: 'silent' });
let primary: PostgresServer;
let standby: PostgresServer;
let pool: pg.Pool;

const multi = (servers: PostgresServer[]) =>
  `postgres://postgres@${servers.map((x) => `127.0.0.1:${x.port}`).join(',')}/postgres?target_session_attrs=read-write&connect_timeout=3`;

beforeAll(async () => {
  primary = await startPostgres();
  standby = await startStandby(primary);
  const url = multi([primary, standby]);
  const config = writeConfig({ kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_SQL } } } });
  const migrated = await runCli(['migrate', '--config', config], { DATABASE_URL: url, REDIS_URL: TEST_REDIS_URL });
  expect(migrated.code, migrated.stderr).toBe(0);
  pool = createPool({ connectionString: url, max: 2, applicationName: 'floors test', logger: silent });
  await createOrdersSchema(pool);
}, 120_000);

afterAll(async () => {
  await pool?.end();
  await stopAllServers();
});

async function tick(floors: ClaimFloors): Promise<FloorsRow> {
  const { rows } = await pool.query<FloorsRow>(await nextDueStatement(pool, [KIND], floors));
  floors.update(rows[0]!);
  return rows[0]!;
}

/** Replayed on the standby: everything the primary has written so far. */
async function standbyCaughtUp(): Promise<void> {
  const { rows } = await pool.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l');
  const l = rows[0]!.l;
  const c = new pg.Client({ connectionString: standby.url() });
  await c.connect();
  try {
    await waitUntil('the standby caught up', async () => (await c.query(`SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok`, [l])).rows[0].ok as boolean);
  } finally {
    await c.end();
  }
}

it('after a failover to a standby that lost the last claims and reduces, the next tick reads from the start again', { timeout: 120_000 }, async () => {
  // 3,000 timeouts due over the next 3.5 s (not written late: a late row holds the floor at its
  // instant), and a scan mapped: both reach the standby.
  await pool.query(
    `WITH o AS (INSERT INTO orders (id, status) SELECT i, 'unpaid' FROM generate_series(1, 3000) i RETURNING id)
     INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, id::text, now() + interval '500 ms' + id * interval '1 ms' FROM o`,
    [KIND],
  );
  const { rows: scan } = await pool.query<{ id: string }>(
    `INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state, shard_count) VALUES (1, 'test', now(), 'mapped', 0) RETURNING id::text`,
  );
  const floors = new ClaimFloors();
  await tick(floors);
  await standbyCaughtUp();

  // The standby stops receiving: what the primary commits from here on is lost in the failover.
  const s = new pg.Client({ connectionString: standby.url() });
  await s.connect();
  await s.query(`ALTER SYSTEM SET primary_conninfo = ''`);
  await s.query('SELECT pg_reload_conf()');
  await waitUntil('the standby stopped streaming', async () => Number((await s.query('SELECT count(*) AS n FROM pg_stat_wal_receiver')).rows[0].n) === 0);
  await s.end();

  // On the primary alone: the first 2,000 taken (gone from the pending rows), the scan reduced, and
  // ticks until the floor and the oldest open scan pass them.
  await pool.query(`DELETE FROM timeout_center.timeouts WHERE biz_id::int <= 2000`);
  await pool.query(`UPDATE timeout_center.scans SET state = 'reduced', reduced_at = now() WHERE id = $1`, [scan[0]!.id]);
  const { rows: first } = await pool.query<{ id: string }>(`SELECT min(id)::text AS id FROM timeout_center.timeouts`);
  await waitUntil('the floor passed the rows taken on the primary', async () => {
    await tick(floors);
    const floor = floors.floorOf(KIND);
    return floor !== undefined && BigInt(floor[1]) >= BigInt(first[0]!.id) && floors.scansFrom() > Number(scan[0]!.id);
  });

  // The primary dies; the standby, without those commits, is promoted. The pool's idle sessions to
  // the primary end (quietly: an idle client's error only drops it).
  await primary.kill();
  await standby.promote();
  const { rows: back } = await pool.query<{ n: number; min: string }>(
    `SELECT count(*)::int AS n, min(id)::text AS min FROM timeout_center.timeouts WHERE state = 'pending'`,
  );
  expect(back[0]!.n, 'the rows taken on the lost primary are pending again').toBe(3000);

  const row = await tick(floors);
  const floor = floors.floorOf(KIND);
  expect(floor, 'a floor from the start of the due index').toBeDefined();
  expect(BigInt(floor![1]), 'the floor does not pass the rows pending again').toBeLessThanOrEqual(BigInt(back[0]!.min));
  expect(Number(row.open_scans_from), 'the scan reduced on the lost primary is open again, and read').toBeLessThanOrEqual(Number(scan[0]!.id));
  expect(floors.scansFrom()).toBeLessThanOrEqual(Number(scan[0]!.id));
});
