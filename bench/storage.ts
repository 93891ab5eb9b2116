// npm run bench:storage [-- options]: bytes per pending timeout, and what would make it smaller.
// Each variant is a fresh database on the bench's own PostgreSQL (bench/lib/server.ts; or
// BENCH_DATABASE_URL), migrated with our migrations (dist/db/migrate.js), then changed as the
// variant says; n pending timeouts are inserted with the README's INSERT (kind, biz_id, due_at,
// payload; one statement over generate_series), the table is VACUUMed, and the sizes are read:
// heap (main fork, with its free space and visibility maps), TOAST, and each index of the
// timeouts table, divided by n. Sizes do not depend on load, so one run is enough. as-migrated is
// the schema of record (sql/0017: kind an enum, columns in alignment order); text-kind and the
// alternatives measured before it migrate only up to sql/0016 (kind text, 0001's column order).
//
// Workloads (the inserted rows; due_at = now() + 15 min + i × 10 ms, distinct due times):
//   bench    biz_id = i::text, no payload: how docs/benchmarks.md's "243 bytes per pending
//            timeout" was measured (the pending-scale run, bench/lib/workloads.ts)
//   readme   biz_id = i::text, payload '{"channel": "app"}': the README's INSERT as written
//   orders   biz_id = (1e9 + i)::text (one width, increasing: order ids), the README's payload
//   uuid     biz_id = a random UUID, the README's payload
// i runs 1..n: the ids of `bench` and `readme` change width (1, 10, 100, ...), so each new id
// lands in the middle of timeouts_one_live_per_biz and its pages split in half; order ids of one
// width always land at the index's right end (pages split full, at fillfactor).
//
//   --n <count>            pending timeouts (default 500,000)
//   --only <variants>      comma separated (default all; see VARIANTS below)
//   --workloads <names>    comma separated (default bench,readme,orders,uuid)
//   --out <file>           also write the figures as JSON here (docs/bench/storage.json is the one
//                          docs/scale.md cites)
//   --help                 this text
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
// dist/: npm run bench:storage builds first.
import { migrate } from '../dist/db/migrate.js';
import { migrationsBefore } from './lib/migrations.ts';
import { KIND } from './lib/orders.ts';
import { startBenchServer } from './lib/server.ts';
import { failUsage, positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string' },
    only: { type: 'string' },
    workloads: { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const usage = (message: string): never => failUsage('bench:storage', message);
const { n: N } = positiveCounts('bench:storage', args, { n: 500_000 });

const WORKLOADS: Record<string, { bizId: string; payload: string }> = {
  bench: { bizId: 'i::text', payload: 'NULL' },
  readme: { bizId: 'i::text', payload: `'{"channel": "app"}'` },
  orders: { bizId: '(1000000000 + i)::text', payload: `'{"channel": "app"}'` },
  uuid: { bizId: 'gen_random_uuid()::text', payload: `'{"channel": "app"}'` },
};

/** A variant: DDL run after the migrations (a table it builds must keep the column names the
 *  README's INSERT writes), the table the rows go to, and how a row's kind is written there. */
interface Variant {
  name: string;
  what: string;
  /** migrated only up to sql/0016 (kind text, 0001's column order): the schema the variant changes */
  before0017?: boolean;
  ddl: string;
  table: string;
  /** the kind column's value in the INSERT ($2 is the kind's name) */
  kindColumn?: string;
  kindValue?: string;
}

const T = 'timeout_center.timeouts';
const FF100 = (indexes: string[]) => indexes.map((i) => `ALTER INDEX timeout_center.${i} SET (fillfactor = 100);`).join('\n');

/** The live table's columns in alignment order: 8-byte columns first, then 4-byte, then the
 *  variable-length ones (no padding between fixed-width columns; the NULL-able ones last in each
 *  group, so a pending row's nulls cost only their bitmap bits). Same names, types and
 *  constraints as sql/0001 (+ later migrations), so every statement would run on it unchanged. */
const reordered = (name: string, kind: 'text' | 'smallint' | 'enum') => `
CREATE TABLE timeout_center.${name} (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  due_at        timestamptz NOT NULL,
  available_at  timestamptz NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  shard_id      bigint,
  finished_at   timestamptz,
  attempts      integer NOT NULL DEFAULT 0,
  ${
    kind === 'text'
      ? `kind          text NOT NULL REFERENCES timeout_center.kinds (kind) ON UPDATE CASCADE ON DELETE RESTRICT,`
      : kind === 'enum'
        ? `kind          timeout_center.kind_name NOT NULL,`
        : `kind_id       smallint NOT NULL,`
  }
  state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'dispatched', 'done', 'cancelled', 'failed')),
  biz_id        text NOT NULL CHECK (length(biz_id) BETWEEN 1 AND 200),
  payload       jsonb,
  result        text CHECK (result IN ('applied', 'skipped')),
  last_error    text
);
CREATE UNIQUE INDEX ${name}_one_live_per_biz ON timeout_center.${name} (${kind === 'smallint' ? 'kind_id' : 'kind'}, biz_id) WHERE state IN ('pending', 'dispatched');
CREATE INDEX ${name}_due_by_kind ON timeout_center.${name} (${kind === 'smallint' ? 'kind_id' : 'kind'}, available_at) WHERE state = 'pending';
CREATE INDEX ${name}_in_flight ON timeout_center.${name} (shard_id) WHERE state = 'dispatched';
CREATE INDEX ${name}_failed ON timeout_center.${name} (${kind === 'smallint' ? 'kind_id' : 'kind'}, finished_at) WHERE state = 'failed';
CREATE INDEX ${name}_purgeable ON timeout_center.${name} (finished_at) WHERE state IN ('done', 'cancelled');
CREATE INDEX ${name}_failed_by_shard ON timeout_center.${name} (shard_id) WHERE state = 'failed';
CREATE TRIGGER ${name}_before_write BEFORE INSERT OR UPDATE OF due_at ON timeout_center.${name}
  FOR EACH ROW EXECUTE FUNCTION timeout_center.timeouts_before_write();`;

/** kind as a PostgreSQL enum (4 bytes; reads and writes as its name, so the README's SQL is
 *  unchanged), its one label the bench's kind. */
const KIND_ENUM = `CREATE TYPE timeout_center.kind_name AS ENUM ('${KIND}');`;
/** The enum in place: ALTER COLUMN TYPE rewrites the table (column order kept). The bench drops the
 *  views that read timeouts.kind and its foreign key to kinds (text) rather than recreating them:
 *  sizes only. */
const ENUM_IN_PLACE = `${KIND_ENUM}
DO $$ DECLARE v record; BEGIN
  FOR v IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'timeout_center' AND c.relkind = 'v' LOOP
    EXECUTE format('DROP VIEW IF EXISTS timeout_center.%I CASCADE', v.relname);
  END LOOP;
END $$;
ALTER TABLE timeout_center.timeouts DROP CONSTRAINT timeouts_kind_fkey;
ALTER TABLE timeout_center.timeouts ALTER COLUMN kind TYPE timeout_center.kind_name USING kind::timeout_center.kind_name;`;

const VARIANTS: Variant[] = [
  { name: 'as-migrated', what: 'timeout_center.timeouts as the migrations leave it (sql/0017: kind an enum, columns in alignment order)', ddl: '', table: T },
  {
    name: 'as-migrated-ff100',
    what: 'as-migrated + timeouts_due_by_key and timeouts_one_live_per_biz at fillfactor 100',
    ddl: FF100(['timeouts_due_by_key', 'timeouts_one_live_per_biz']),
    table: T,
  },
  { name: 'text-kind', what: "before sql/0017: kind text, columns in 0001's order (the 243 B of record until then)", before0017: true, ddl: '', table: T },
  {
    name: 'ff100-due',
    what: 'timeouts_due_by_kind at fillfactor 100 (ALTER INDEX ... SET, then REINDEX CONCURRENTLY: online)',
    before0017: true,
    ddl: FF100(['timeouts_due_by_kind']),
    table: T,
  },
  {
    name: 'ff100-due-live',
    what: 'timeouts_due_by_kind and timeouts_one_live_per_biz at fillfactor 100',
    before0017: true,
    ddl: FF100(['timeouts_due_by_kind', 'timeouts_one_live_per_biz']),
    table: T,
  },
  {
    name: 'reordered',
    what: 'the same columns in alignment order (8-byte, 4-byte, then variable-length): a table rewrite',
    before0017: true,
    ddl: reordered('timeouts_r', 'text'),
    table: 'timeout_center.timeouts_r',
  },
  {
    name: 'reordered-ff100',
    what: 'reordered + both indexes at fillfactor 100',
    before0017: true,
    ddl: reordered('timeouts_r', 'text') + FF100(['timeouts_r_due_by_kind', 'timeouts_r_one_live_per_biz']),
    table: 'timeout_center.timeouts_r',
  },
  {
    name: 'per-kind-due',
    what: 'timeouts_due_by_kind replaced by one partial index (available_at) per kind (WHERE kind = ...): no kind in its entries',
    before0017: true,
    ddl: `DROP INDEX timeout_center.timeouts_due_by_kind;
          CREATE INDEX timeouts_due_order_unpaid ON timeout_center.timeouts (available_at) WHERE state = 'pending' AND kind = '${KIND}';`,
    table: T,
  },
  {
    name: 'citus-bucket',
    what: 'the Citus layout on one server (docs/scale.md): bucket smallint generated from hashtextextended(biz_id, 0), in the unique index (bucket, kind, biz_id) and the claim index (kind, bucket, available_at)',
    before0017: true,
    ddl: `ALTER TABLE timeout_center.timeouts ADD COLUMN bucket smallint NOT NULL
            GENERATED ALWAYS AS ((hashtextextended(biz_id, 0) & 1023)::smallint) STORED;
          DROP INDEX timeout_center.timeouts_due_by_kind;
          CREATE INDEX timeouts_due_by_kind ON timeout_center.timeouts (kind, bucket, available_at) WHERE state = 'pending';
          DROP INDEX timeout_center.timeouts_one_live_per_biz;
          CREATE UNIQUE INDEX timeouts_one_live_per_biz ON timeout_center.timeouts (bucket, kind, biz_id) WHERE state IN ('pending', 'dispatched');`,
    table: T,
  },
  {
    name: 'kind-smallint',
    what: 'reordered, kind as a smallint id (kinds gets an id column); the README INSERT would need the id or a trigger',
    before0017: true,
    ddl: `ALTER TABLE timeout_center.kinds ADD COLUMN kind_id smallint GENERATED ALWAYS AS IDENTITY UNIQUE;` + reordered('timeouts_k', 'smallint'),
    table: 'timeout_center.timeouts_k',
    kindColumn: 'kind_id',
    kindValue: '(SELECT kind_id FROM timeout_center.kinds WHERE kind = $2)',
  },
  {
    name: 'kind-smallint-ff100',
    what: 'kind-smallint + both indexes at fillfactor 100',
    before0017: true,
    ddl:
      `ALTER TABLE timeout_center.kinds ADD COLUMN kind_id smallint GENERATED ALWAYS AS IDENTITY UNIQUE;` +
      reordered('timeouts_k', 'smallint') +
      FF100(['timeouts_k_due_by_kind', 'timeouts_k_one_live_per_biz']),
    table: 'timeout_center.timeouts_k',
    kindColumn: 'kind_id',
    kindValue: '(SELECT kind_id FROM timeout_center.kinds WHERE kind = $2)',
  },
  {
    name: 'enum-kind',
    what: 'kind as an enum (4 bytes, written and read as its name), in place: ALTER COLUMN TYPE (a table rewrite, column order kept)',
    before0017: true,
    ddl: ENUM_IN_PLACE,
    table: T,
  },
  {
    name: 'enum-kind-ff100',
    what: 'enum-kind + both indexes at fillfactor 100',
    before0017: true,
    ddl: ENUM_IN_PLACE + FF100(['timeouts_due_by_kind', 'timeouts_one_live_per_biz']),
    table: T,
  },
  {
    name: 'enum-kind-reordered',
    what: 'kind as an enum, columns in alignment order (a new table, copy and swap)',
    before0017: true,
    ddl: KIND_ENUM + reordered('timeouts_e', 'enum'),
    table: 'timeout_center.timeouts_e',
  },
  {
    name: 'enum-kind-reordered-ff100',
    what: 'enum-kind-reordered + both indexes at fillfactor 100',
    before0017: true,
    ddl: KIND_ENUM + reordered('timeouts_e', 'enum') + FF100(['timeouts_e_due_by_kind', 'timeouts_e_one_live_per_biz']),
    table: 'timeout_center.timeouts_e',
  },
];

const names = args.only ? args.only.split(',').map((s) => s.trim()) : VARIANTS.map((v) => v.name);
const unknown = names.filter((n) => !VARIANTS.some((v) => v.name === n));
if (unknown.length > 0) usage(`unknown variant(s) ${unknown.join(', ')}; known: ${VARIANTS.map((v) => v.name).join(', ')}`);
const workloads = (args.workloads ?? 'bench,readme,orders,uuid').split(',').map((s) => s.trim());
const unknownW = workloads.filter((w) => !(w in WORKLOADS));
if (unknownW.length > 0) usage(`unknown workload(s) ${unknownW.join(', ')}; known: ${Object.keys(WORKLOADS).join(', ')}`);

interface Sizes {
  heap: number;
  toast: number;
  indexes: Record<string, number>;
  total: number;
}

async function measure(pool: pg.Pool, table: string): Promise<Sizes> {
  const { rows } = await pool.query<{ heap: string; toast: string; total: string }>(
    `SELECT pg_table_size(c.oid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) AS heap,
            coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) AS toast,
            pg_total_relation_size(c.oid) AS total
       FROM pg_class c WHERE c.oid = $1::regclass`,
    [table],
  );
  const idx = await pool.query<{ name: string; size: string }>(
    `SELECT i.indexrelid::regclass::text AS name, pg_relation_size(i.indexrelid) AS size
       FROM pg_index i WHERE i.indrelid = $1::regclass ORDER BY 1`,
    [table],
  );
  const r = rows[0]!;
  return {
    heap: Number(r.heap),
    toast: Number(r.toast),
    total: Number(r.total),
    indexes: Object.fromEntries(idx.rows.map((x) => [x.name.replace(/^timeout_center\./, ''), Number(x.size)])),
  };
}

async function once(server: Awaited<ReturnType<typeof startBenchServer>>, v: Variant, w: string): Promise<Sizes> {
  const db = await server.createDatabase('bench_storage');
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  pool.on('error', () => {});
  try {
    await migrate(pool, pino({ level: 'silent' }), v.before0017 ? migrationsBefore(17) : undefined);
    await pool.query(`INSERT INTO timeout_center.kinds (kind) VALUES ($1)`, [KIND]);
    if (v.ddl) await pool.query(v.ddl);
    const { bizId, payload } = WORKLOADS[w]!;
    // The README's INSERT (kind, biz_id, due_at, payload), n rows in one statement.
    await pool.query(
      `INSERT INTO ${v.table} (${v.kindColumn ?? 'kind'}, biz_id, due_at, payload)
       SELECT ${v.kindValue ?? '$2'}, ${bizId}, now() + interval '15 minutes' + i * interval '10 ms', ${payload}
         FROM generate_series(1, $1::int) i`,
      [N, KIND],
    );
    await pool.query(`VACUUM ${v.table}`);
    return await measure(pool, v.table);
  } finally {
    await pool.end();
    await db.drop();
  }
}

const b = (bytes: number) => (bytes / N).toFixed(1);

async function main(): Promise<void> {
  const server = await startBenchServer({ walWarmupBytes: 0 });
  try {
    const chosen = VARIANTS.filter((v) => names.includes(v.name));
    console.log(`${N.toLocaleString('en')} pending timeouts per run, inserted the README's way, then VACUUM; bytes per pending timeout`);
    const totals = new Map<string, Map<string, number>>();
    // bytes per pending timeout, per variant and workload, for --out
    const figures: { variant: string; workload: string; total: number; heap: number; toast: number; indexes: Record<string, number> }[] = [];
    const perTimeout = (bytes: number) => Number((bytes / N).toFixed(1));
    for (const w of workloads) {
      console.log(`\n### workload ${w} (biz_id ${WORKLOADS[w]!.bizId}, payload ${WORKLOADS[w]!.payload})\n`);
      console.log('| variant | total | heap | TOAST | indexes (each, the empty partial ones left out) |\n|---|---:|---:|---:|---|');
      for (const v of chosen) {
        const s = await once(server, v, w);
        const idx = Object.entries(s.indexes)
          .filter(([, size]) => size > 8192 * 2)
          .map(([name, size]) => `${name} ${b(size)}`)
          .join(', ');
        const empty = Object.values(s.indexes).filter((size) => size <= 8192 * 2).length;
        console.log(`| ${v.name} | **${b(s.total)}** | ${b(s.heap)} | ${b(s.toast)} | ${idx}; ${empty} empty partial indexes |`);
        figures.push({
          variant: v.name,
          workload: w,
          total: perTimeout(s.total),
          heap: perTimeout(s.heap),
          toast: perTimeout(s.toast),
          indexes: Object.fromEntries(Object.entries(s.indexes).map(([name, size]) => [name, perTimeout(size)])),
        });
        if (!totals.has(v.name)) totals.set(v.name, new Map());
        totals.get(v.name)!.set(w, s.total / N);
      }
    }
    console.log(`\n| variant | ${workloads.join(' | ')} | what changes |\n|---|${workloads.map(() => '---:').join('|')}|---|`);
    for (const v of chosen) {
      console.log(`| ${v.name} | ${workloads.map((w) => totals.get(v.name)!.get(w)!.toFixed(1)).join(' | ')} | ${v.what} |`);
    }
    if (args.out) {
      const what = Object.fromEntries(chosen.map((v) => [v.name, v.what]));
      writeFileSync(
        args.out,
        `${JSON.stringify({ at: new Date().toISOString(), n: N, unit: 'bytes per pending timeout', variants: what, figures }, null, 2)}\n`,
      );
    }
  } finally {
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
