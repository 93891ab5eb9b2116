// npm run bench:late-probe [-- --rows <n>]: what one coordinator tick costs once N timeouts written
// late (due before they were written) have been claimed while another connection holds an old
// snapshot (docs/vacuum-horizon-figures.md "Rows written late"). Two statements, the same
// database, the same seconds: this build's next_due (its late probe reads from the previous tick's
// xmin on, sql/0054) and the late probe of the build before (timeouts_written_late from the kind's
// start, inline), each run five times under EXPLAIN (ANALYZE, BUFFERS); the medians are reported.
// Then, under the same snapshot, a second kind with nothing pending whose --cancelled timeouts were
// all cancelled ahead of their due time (deleted, due tomorrow): this build's next_due, whose floor
// walk stops at the floor's bound and whose look for the next due time stops a minute ahead,
// against the same statement with both reading on to the kind's end, as the build before did.
// The bench's own PostgreSQL (bench/lib/server.ts), as the other benches.
//   --rows <n>        timeouts written late and claimed under the snapshot (default 3,000,000)
//   --cancelled <n>   timeouts of the idle kind cancelled under the snapshot (default 1,000,000)
//   --help            this text
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
// dist/: the benches that use this build first.
import { ClaimFloors } from '../dist/coordinator/claim-floors.js';
import { migrate } from '../dist/db/migrate.js';
import { sql } from '../dist/db/queries.js';
import { startBenchServer } from './lib/server.ts';
import { printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: { rows: { type: 'string' }, cancelled: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false } },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const ROWS = Number((args.rows ?? '3000000').replace(/_/g, ''));
if (!Number.isInteger(ROWS) || ROWS < 1) throw new Error(`--rows: a positive integer, not ${args.rows}`);
const CANCELLED = Number((args.cancelled ?? '1000000').replace(/_/g, ''));
if (!Number.isInteger(CANCELLED) || CANCELLED < 1) throw new Error(`--cancelled: a positive integer, not ${args.cancelled}`);
const KIND = 'order.unpaid';
/** The kind with nothing pending: every timeout it had was cancelled before its due time. */
const IDLE = 'order.unreviewed';
const server = await startBenchServer();
const db = await server.createDatabase('late_probe');
const pool = new pg.Pool({ connectionString: db.url, max: 3 });
const holder = new pg.Client({ connectionString: db.url });
try {
  await migrate(pool, pino({ level: 'silent' }));
  await pool.query(`INSERT INTO timeout_center.kinds (kind) VALUES ($1), ($2) ON CONFLICT DO NOTHING`, [KIND, IDLE]);
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT 1 FROM timeout_center.kinds LIMIT 1');
  console.log(`writing ${ROWS.toLocaleString('en')} timeouts an hour late, then claiming them (deleting) under the snapshot`);
  for (let from = 1; from <= ROWS; from += 500_000) {
    const to = Math.min(ROWS, from + 499_999);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT $1, g::text, now() - interval '1 hour' + g * interval '1 microsecond' FROM generate_series($2::int, $3::int) g`,
      [KIND, from, to],
    );
    await pool.query('DELETE FROM timeout_center.timeouts WHERE biz_id::int BETWEEN $1 AND $2', [from, to]);
  }
  // a steady stream's live rows: due now and in the next seconds
  await pool.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $1, 'live-' || g, clock_timestamp() + g * interval '5 milliseconds' FROM generate_series(1, 2000) g`,
    [KIND],
  );
  await pool.query('ANALYZE timeout_center.timeouts');
  const floors = new ClaimFloors();
  for (let tick = 0; tick < 3; tick++) {
    const { rows } = await pool.query(sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() }));
    floors.update(rows[0]);
    await new Promise((r) => setTimeout(r, 1100));
  }
  const explain = async (text: string, values: unknown[]) => {
    const { rows } = await pool.query({ text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, values });
    const top = (rows[0]['QUERY PLAN'] as { Plan: Record<string, number>; 'Execution Time': number }[])[0]!;
    return { ms: top['Execution Time'], buffers: (top.Plan['Shared Hit Blocks'] ?? 0) + (top.Plan['Shared Read Blocks'] ?? 0) };
  };
  const oldProbe = `SELECT (SELECT t.available_at FROM timeout_center.timeouts t
                             WHERE t.kind = $1::timeout_center.kind AND t.state = 'pending' AND t.written_late
                             ORDER BY t.available_at LIMIT 1) AS late_at`;
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const runs: Record<string, { ms: number; buffers: number }[]> = { tick: [], newProbe: [], oldProbe: [] };
  for (let i = 0; i < 5; i++) {
    const tick = sql('coordinator/next_due', { kinds: [KIND], ...floors.inputs() });
    runs.tick!.push(await explain(tick.text, tick.values));
    runs.newProbe!.push(await explain('SELECT timeout_center.pending_late_first($1::timeout_center.kind, $2::xid8)', [KIND, floors.inputs().lateFrom]));
    runs.oldProbe!.push(await explain(oldProbe, [KIND]));
  }
  const line = (name: string, r: { ms: number; buffers: number }[]) =>
    `${name.padEnd(52)} ${median(r.map((x) => x.ms))
      .toFixed(2)
      .padStart(9)} ms ${String(median(r.map((x) => x.buffers))).padStart(9)} buffers`;
  console.log(`\nmedians of 5, ${ROWS.toLocaleString('en')} late rows claimed under the snapshot:`);
  console.log(line("next_due, this build's tick", runs.tick!));
  console.log(line('  its late probe (pending_late_first)', runs.newProbe!));
  console.log(line("the build before's late probe (inline, from the start)", runs.oldProbe!));

  console.log(`\ncancelling ${CANCELLED.toLocaleString('en')} timeouts of ${IDLE} ahead of their due time under the snapshot`);
  for (let from = 1; from <= CANCELLED; from += 500_000) {
    const to = Math.min(CANCELLED, from + 499_999);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
       SELECT $1, g::text, now() + interval '1 day' + g * interval '1 millisecond' FROM generate_series($2::int, $3::int) g`,
      [IDLE, from, to],
    );
    await pool.query('DELETE FROM timeout_center.timeouts WHERE kind = $1', [IDLE]);
  }
  const both = new ClaimFloors();
  for (let tick = 0; tick < 3; tick++) {
    const { rows } = await pool.query(sql('coordinator/next_due', { kinds: [KIND, IDLE], ...both.inputs() }));
    both.update(rows[0]);
    await new Promise((r) => setTimeout(r, 1100));
  }
  const bounded = sql('coordinator/next_due', { kinds: [KIND, IDLE], ...both.inputs() });
  // The build before's two reads: on to the kind's end ('infinity').
  const unbound = (text: string, from: string, to: string) => {
    if (!text.includes(from)) throw new Error(`next_due.sql changed: the bench's unbounded form no longer finds ${from}`);
    return text.replace(from, to);
  };
  const unbounded = unbound(
    unbound(bounded.text, '0), (SELECT b.at FROM bound b)) w ON true', "0), 'infinity') w ON true"),
    "0, now() + interval '1 minute') d) AS next_after",
    "0, 'infinity') d) AS next_after",
  );
  const idle: Record<string, { ms: number; buffers: number }[]> = { bounded: [], unbounded: [] };
  for (let i = 0; i < 5; i++) {
    idle.bounded!.push(await explain(bounded.text, bounded.values));
    idle.unbounded!.push(await explain(unbounded, bounded.values));
  }
  console.log(`\nmedians of 5, ${CANCELLED.toLocaleString('en')} timeouts of an idle kind cancelled under the snapshot:`);
  console.log(line("next_due, this build's tick", idle.bounded!));
  console.log(line('the same, its floor walk and next due read to the end', idle.unbounded!));
} finally {
  await holder.end().catch(() => {});
  await pool.end();
  await db.drop();
  await server.stop();
}
