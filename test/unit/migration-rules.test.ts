// Every migration after 1.0.0 (numbered above 0023) keeps the rules of an online migration
// (test/helpers/migration-rules.ts, on PostgreSQL's own parser): checked here on the real files in
// sql/, and each rule proven to fire on a small unsafe migration and to pass its safe form. No
// database: the checker reads the parse tree.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from '../../src/db/migrate.js';
import { LAST_BEFORE_1_0, RULES, checkMigrations, formatViolation, type MigrationSource, type RuleId } from '../helpers/migration-rules.js';

const real: MigrationSource[] = readdirSync(MIGRATIONS_DIR)
  .filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f))
  .sort()
  .map((f) => ({ file: `sql/${f}`, sql: readFileSync(`${MIGRATIONS_DIR}/${f}`, 'utf8') }));
/** The schema as 0.1.0 left it: what a fixture migration runs against. */
const before1 = real.filter((m) => Number(m.file.slice(4, 8)) <= LAST_BEFORE_1_0);

const FIXTURES = fileURLToPath(new URL('../fixtures/unsafe-migrations/', import.meta.url));
const GUIDE = fileURLToPath(new URL('../../docs/writing-migrations.md', import.meta.url));

/** Checks fixture files numbered from 0024 on top of the migrations of 0.1.0. */
async function check(...sqls: string[]) {
  const files = sqls.map((sql, i) => ({ file: `sql/${String(LAST_BEFORE_1_0 + 1 + i).padStart(4, '0')}_fixture.sql`, sql }));
  return checkMigrations([...before1, ...files]);
}

async function rulesOf(...sqls: string[]): Promise<RuleId[]> {
  return (await check(...sqls)).map((v) => v.rule);
}

describe('the migrations in sql/', () => {
  it('every migration after 1.0.0 keeps the rules', async () => {
    const after = real.filter((m) => Number(m.file.slice(4, 8)) > LAST_BEFORE_1_0);
    const violations = await checkMigrations(real);
    // One message per violation: the file and line, the statement, the rule, the safe way.
    expect(violations.map(formatViolation).join('\n\n'), `${after.length} migration(s) after 0023 checked`).toBe('');
  });

  it('the checker reads the old ones as a reviewer would: what made them unsafe is found', async () => {
    const old = await checkMigrations(real, { judgeAbove: 0 });
    const at = (file: string, rule: RuleId) => old.some((v) => v.file.includes(file) && v.rule === rule);
    expect(at('0002_retention', 'index-concurrently')).toBe(true);
    expect(at('0003_worker_claim', 'set-not-null')).toBe(true);
    expect(at('0003_worker_claim', 'unbatched-write')).toBe(true);
    expect(at('0010_done_timeouts', 'unbatched-write')).toBe(true);
    expect(at('0015_store_audit', 'constraint-not-valid')).toBe(true);
    expect(at('0017_kind_enum', 'lock-table')).toBe(true);
    expect(at('0017_kind_enum', 'drop-or-rename')).toBe(true);
    expect(at('0020_stored_target', 'index-concurrently')).toBe(true);
    // and what was safe is not: 0011, 0013, 0018, 0022 add a nullable column, a view, a constant default
    for (const file of ['0011_', '0013_', '0016_', '0018_', '0022_']) expect(old.filter((v) => v.file.includes(file))).toEqual([]);
  });
});

describe('a violation message', () => {
  it('names the file, the line of the statement, the rule and the safe way to write it', async () => {
    const [v, ...rest] = await check('-- 0024_fixture: an index\n\n-- on created_at\nCREATE INDEX timeouts_created ON timeout_center.timeouts (created_at);\n');
    expect(rest).toEqual([]);
    expect(v).toMatchObject({ file: 'sql/0024_fixture.sql', line: 4, rule: 'index-concurrently' });
    const text = formatViolation(v!);
    expect(text).toContain('sql/0024_fixture.sql:4: CREATE INDEX timeouts_created ON timeout_center.timeouts (created_at)');
    expect(text).toContain(`rule index-concurrently (${RULES['index-concurrently']})`);
    expect(text).toContain('safe: CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS');
  });

  it('counts lines on the file as written, multi-byte characters included', async () => {
    const [v] = await check('-- 0024: über → naïve\n-- µs\nSELECT 1;\nLOCK TABLE timeout_center.shards IN SHARE MODE;\n');
    expect(v).toMatchObject({ line: 4, rule: 'lock-table' });
  });
});

describe('each rule fires on an unsafe migration and passes its safe form', () => {
  it('index-concurrently: CREATE INDEX, DROP INDEX and REINDEX on an existing table', async () => {
    expect(await rulesOf('CREATE INDEX timeouts_created ON timeout_center.timeouts (created_at);')).toEqual(['index-concurrently']);
    expect(await rulesOf('CREATE UNIQUE INDEX shards_x ON timeout_center.shards (scan_id, seq);')).toEqual(['index-concurrently']);
    expect(await rulesOf('DROP INDEX timeout_center.timeouts_failed;')).toEqual(['index-concurrently']);
    expect(await rulesOf('REINDEX INDEX timeout_center.timeouts_due_by_kind;')).toEqual(['index-concurrently']);
    expect(await rulesOf('-- tc:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_created ON timeout_center.timeouts (created_at);\n')).toEqual(
      [],
    );
    expect(await rulesOf('-- tc:no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS timeout_center.timeouts_failed;\n')).toEqual([]);
    expect(await rulesOf('-- tc:no-transaction\nREINDEX INDEX CONCURRENTLY timeout_center.timeouts_due_by_kind;\n')).toEqual([]);
    // A table created in the same migration is nobody else's yet: a plain index is fine.
    expect(
      await rulesOf(`CREATE TABLE timeout_center.leases (id bigint PRIMARY KEY, holder text NOT NULL);
CREATE INDEX leases_holder ON timeout_center.leases (holder);
DROP INDEX timeout_center.leases_holder;`),
    ).toEqual([]);
  });

  it('concurrently-in-transaction: CONCURRENTLY in a file without -- tc:no-transaction', async () => {
    expect(await rulesOf('CREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_created ON timeout_center.timeouts (created_at);')).toEqual([
      'concurrently-in-transaction',
    ]);
    expect(await rulesOf('DROP INDEX CONCURRENTLY IF EXISTS timeout_center.timeouts_failed;')).toEqual(['concurrently-in-transaction']);
  });

  it('no-transaction-idempotent: a statement of a no-transaction file that cannot run twice', async () => {
    const noTx = (sql: string) => `-- 0024_fixture\n-- tc:no-transaction\n${sql}\n`;
    expect(await rulesOf(noTx('CREATE INDEX CONCURRENTLY timeouts_created ON timeout_center.timeouts (created_at);'))).toEqual(['no-transaction-idempotent']);
    expect(await rulesOf(noTx('CREATE TABLE timeout_center.leases (id bigint PRIMARY KEY);'))).toEqual(['no-transaction-idempotent']);
    expect(await rulesOf(noTx('ALTER TABLE timeout_center.timeouts ADD COLUMN note text;'))).toEqual(['no-transaction-idempotent']);
    expect(await rulesOf(noTx("INSERT INTO timeout_center.kinds (kind) VALUES ('order.x');"))).toEqual(['no-transaction-idempotent']);
    expect(await rulesOf(noTx('DROP INDEX CONCURRENTLY timeout_center.timeouts_failed;'))).toEqual(['no-transaction-idempotent']);
    expect(
      await rulesOf(
        noTx(`CREATE TABLE IF NOT EXISTS timeout_center.leases (id bigint PRIMARY KEY);
CREATE INDEX CONCURRENTLY IF NOT EXISTS timeouts_created ON timeout_center.timeouts (created_at);
ALTER TABLE timeout_center.timeouts ADD COLUMN IF NOT EXISTS note text;
INSERT INTO timeout_center.kinds (kind) VALUES ('order.x') ON CONFLICT DO NOTHING;
CREATE OR REPLACE VIEW timeout_center.notes AS SELECT id, note FROM timeout_center.timeouts;
COMMENT ON COLUMN timeout_center.timeouts.note IS 'a note';`),
      ),
    ).toEqual([]);
  });

  it('no-transaction-split: a no-transaction file the runner would split differently from PostgreSQL', async () => {
    const twoOnOneLine = `-- tc:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON timeout_center.timeouts (created_at); CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON timeout_center.timeouts (finished_at);
`;
    expect(await rulesOf(twoOnOneLine)).toEqual(['no-transaction-split']);
    const functionBody = `-- tc:no-transaction
CREATE OR REPLACE FUNCTION timeout_center.f() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  RETURN 1;
END $$;
`;
    expect(await rulesOf(functionBody)).toEqual(['no-transaction-split']);
    // A comment after the ; is fine: the runner splits there too.
    expect(
      await rulesOf(`-- tc:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON timeout_center.timeouts (created_at); -- by schedule time
CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON timeout_center.timeouts (finished_at);
`),
    ).toEqual([]);
  });

  it('constraint-not-valid: a CHECK or FOREIGN KEY validated while writes wait', async () => {
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_attempts_check CHECK (attempts >= 0);')).toEqual([
      'constraint-not-valid',
    ]);
    expect(
      await rulesOf('ALTER TABLE timeout_center.shards ADD CONSTRAINT shards_kind_fkey FOREIGN KEY (kind) REFERENCES timeout_center.kinds (kind);'),
    ).toEqual(['constraint-not-valid']);
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ADD COLUMN priority integer CHECK (priority > 0);')).toEqual(['constraint-not-valid']);
    expect(await rulesOf('ALTER TABLE timeout_center.shards ADD COLUMN kind_ref text REFERENCES timeout_center.kinds (kind);')).toEqual([
      'constraint-not-valid',
    ]);
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_attempts_check CHECK (attempts >= 0) NOT VALID;')).toEqual([]);
    expect(
      await rulesOf(
        'ALTER TABLE timeout_center.shards ADD CONSTRAINT shards_kind_fkey FOREIGN KEY (kind) REFERENCES timeout_center.kinds (kind) NOT VALID;',
        'ALTER TABLE timeout_center.shards VALIDATE CONSTRAINT shards_kind_fkey;',
      ),
    ).toEqual([]);
  });

  it('unique-using-index: a UNIQUE or PRIMARY KEY must come from an index built CONCURRENTLY', async () => {
    expect(await rulesOf('ALTER TABLE timeout_center.done_timeouts ADD CONSTRAINT done_biz UNIQUE (kind, biz_id, id);')).toEqual(['unique-using-index']);
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ADD COLUMN ref uuid UNIQUE;')).toEqual(['unique-using-index']);
    expect(
      await rulesOf(
        '-- tc:no-transaction\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS done_biz ON timeout_center.done_timeouts (kind, biz_id, id);\n',
        'ALTER TABLE timeout_center.done_timeouts ADD CONSTRAINT done_biz UNIQUE USING INDEX done_biz;',
      ),
    ).toEqual([]);
  });

  it('validate-separately: VALIDATE in the transaction that added the constraint (or altered the table)', async () => {
    expect(
      await rulesOf(`ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_attempts_check CHECK (attempts >= 0) NOT VALID;
ALTER TABLE timeout_center.timeouts VALIDATE CONSTRAINT timeouts_attempts_check;`),
    ).toEqual(['validate-separately']);
    expect(
      await rulesOf(
        'ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_attempts_check CHECK (attempts >= 0) NOT VALID;',
        `ALTER TABLE timeout_center.timeouts ADD COLUMN note text;
ALTER TABLE timeout_center.timeouts VALIDATE CONSTRAINT timeouts_attempts_check;`,
      ),
    ).toEqual(['validate-separately']);
    expect(
      await rulesOf(
        'ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_attempts_check CHECK (attempts >= 0) NOT VALID;',
        'ALTER TABLE timeout_center.timeouts VALIDATE CONSTRAINT timeouts_attempts_check;',
      ),
    ).toEqual([]);
  });

  it('column-type: a column type changed', async () => {
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ALTER COLUMN biz_id TYPE varchar(300);')).toEqual(['column-type']);
    expect(await rulesOf('ALTER TABLE timeout_center.shards ALTER COLUMN size SET DATA TYPE bigint;')).toEqual(['column-type']);
    expect(await rulesOf('ALTER TABLE timeout_center.shards ADD COLUMN size_big bigint;')).toEqual([]);
  });

  it('volatile-default: a column added with a default PostgreSQL must compute per row', async () => {
    for (const def of ['clock_timestamp()', 'random()', 'gen_random_uuid()', "nextval('timeout_center.timeouts_id_seq')", 'my_function()']) {
      expect(await rulesOf(`ALTER TABLE timeout_center.timeouts ADD COLUMN x text DEFAULT ${def};`), def).toEqual(['volatile-default']);
    }
    expect(await rulesOf('ALTER TABLE timeout_center.shards ADD COLUMN n bigserial;')).toEqual(['volatile-default']);
    expect(await rulesOf('ALTER TABLE timeout_center.shards ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY;')).toEqual(['volatile-default']);
    expect(await rulesOf('ALTER TABLE timeout_center.shards ADD COLUMN n bigint GENERATED ALWAYS AS (size * 2) STORED;')).toEqual(['volatile-default']);
    // Stable and constant defaults are stored once in the catalog (PostgreSQL 11+): no rewrite.
    expect(
      await rulesOf(`ALTER TABLE timeout_center.timeouts ADD COLUMN seen_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE timeout_center.timeouts ADD COLUMN at2 timestamptz DEFAULT CURRENT_TIMESTAMP;
ALTER TABLE timeout_center.timeouts ADD COLUMN tries integer NOT NULL DEFAULT 0;
ALTER TABLE timeout_center.timeouts ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
ALTER TABLE timeout_center.timeouts ADD COLUMN ref uuid;
ALTER TABLE timeout_center.timeouts ALTER COLUMN ref SET DEFAULT gen_random_uuid();`),
    ).toEqual([]);
    // A new table may have any default.
    expect(
      await rulesOf('CREATE TABLE timeout_center.leases (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), at timestamptz DEFAULT clock_timestamp());'),
    ).toEqual([]);
  });

  it('set-not-null: SET NOT NULL without a validated CHECK (col IS NOT NULL) first', async () => {
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ALTER COLUMN trace_parent SET NOT NULL;')).toEqual(['set-not-null']);
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts ADD COLUMN note text NOT NULL;')).toEqual(['set-not-null']);
    // Added NOT VALID but never validated: still a scan.
    expect(
      await rulesOf(
        'ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_trace_parent_not_null CHECK (trace_parent IS NOT NULL) NOT VALID;',
        'ALTER TABLE timeout_center.timeouts ALTER COLUMN trace_parent SET NOT NULL;',
      ),
    ).toEqual(['set-not-null']);
    expect(
      await rulesOf(
        'ALTER TABLE timeout_center.timeouts ADD CONSTRAINT timeouts_trace_parent_not_null CHECK (trace_parent IS NOT NULL) NOT VALID;',
        'ALTER TABLE timeout_center.timeouts VALIDATE CONSTRAINT timeouts_trace_parent_not_null;',
        `ALTER TABLE timeout_center.timeouts ALTER COLUMN trace_parent SET NOT NULL;
ALTER TABLE timeout_center.timeouts DROP CONSTRAINT timeouts_trace_parent_not_null;`,
      ),
    ).toEqual([]);
  });

  it('drop-or-rename: what the previous release reads, dropped or renamed without -- tc:unread-since', async () => {
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts DROP COLUMN trace_parent;')).toEqual(['drop-or-rename']);
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts RENAME COLUMN trace_parent TO traceparent;')).toEqual(['drop-or-rename']);
    expect(await rulesOf('ALTER TABLE timeout_center.markers RENAME TO business_markers;')).toEqual(['drop-or-rename']);
    expect(await rulesOf('DROP TABLE timeout_center.circuit_breakers;')).toEqual(['drop-or-rename']);
    expect(await rulesOf('DROP VIEW timeout_center.live_workers;')).toEqual(['drop-or-rename']);
    expect(await rulesOf('DROP FUNCTION timeout_center.worker_gone(text, integer);')).toEqual(['drop-or-rename']);
    expect(await rulesOf('TRUNCATE timeout_center.done_timeouts;')).toEqual(['drop-or-rename']);
    // The directive alone is not enough: code older than the named release must be kept off the schema.
    expect(
      await rulesOf('-- tc:unread-since 1.1.0 timeout_center.timeouts.trace_parent\nALTER TABLE timeout_center.timeouts DROP COLUMN trace_parent;\n'),
    ).toEqual(['drop-or-rename']);
    expect(
      await rulesOf(
        '-- tc:oldest-code 1.1.0\n-- tc:unread-since 1.1.0 timeout_center.timeouts.trace_parent\nALTER TABLE timeout_center.timeouts DROP COLUMN trace_parent;\n',
      ),
    ).toEqual([]);
    // A floor raised by an earlier migration counts too.
    expect(
      await rulesOf(
        '-- tc:oldest-code 1.2.0\nSELECT 1;\n',
        '-- tc:unread-since 1.1.0 timeout_center.circuit_breakers\nDROP TABLE IF EXISTS timeout_center.circuit_breakers;\n',
      ),
    ).toEqual([]);
    // A view replaced in the same transaction is never missing for a reader.
    expect(
      await rulesOf(`DROP VIEW timeout_center.live_workers;
CREATE VIEW timeout_center.live_workers AS SELECT w.worker_id, w.host FROM timeout_center.workers w;`),
    ).toEqual([]);
    // What this migration created is its own to drop.
    expect(await rulesOf('CREATE TABLE timeout_center.scratch (id bigint);\nDROP TABLE timeout_center.scratch;')).toEqual([]);
  });

  it('lock-table: an explicit LOCK TABLE, in any mode', async () => {
    expect(await rulesOf('LOCK TABLE timeout_center.timeouts IN ACCESS EXCLUSIVE MODE;')).toEqual(['lock-table']);
    expect(await rulesOf('LOCK TABLE timeout_center.kinds IN SHARE ROW EXCLUSIVE MODE;')).toEqual(['lock-table']);
    expect(await rulesOf('LOCK timeout_center.shards;')).toEqual(['lock-table']);
  });

  it('table-rewrite: VACUUM FULL, CLUSTER, SET TABLESPACE, SET LOGGED, SET UNLOGGED', async () => {
    expect(await rulesOf('-- tc:no-transaction\nVACUUM FULL timeout_center.timeouts;\n')).toEqual(['table-rewrite']);
    expect(await rulesOf('CLUSTER timeout_center.done_timeouts USING done_timeouts_pkey;')).toEqual(['table-rewrite']);
    expect(await rulesOf('ALTER TABLE timeout_center.shards SET TABLESPACE fast_disk;')).toEqual(['table-rewrite']);
    expect(await rulesOf('ALTER TABLE timeout_center.timeouts SET UNLOGGED;')).toEqual(['table-rewrite']);
    expect(await rulesOf('ALTER TABLE timeout_center.done_timeouts SET LOGGED;')).toEqual(['table-rewrite']);
    // Plain VACUUM and ANALYZE rewrite nothing.
    expect(await rulesOf('-- tc:no-transaction\nVACUUM (ANALYZE) timeout_center.timeouts;\n')).toEqual([]);
    expect(await rulesOf('ANALYZE timeout_center.timeouts;')).toEqual([]);
  });

  it('unbatched-write: an UPDATE or DELETE over a table that grows with traffic', async () => {
    expect(await rulesOf("UPDATE timeout_center.timeouts SET trace_parent = '' WHERE trace_parent IS NULL;")).toEqual(['unbatched-write']);
    expect(await rulesOf("DELETE FROM timeout_center.done_timeouts WHERE finished_at < now() - interval '90 days';")).toEqual(['unbatched-write']);
    expect(
      await rulesOf(`CREATE TABLE timeout_center.old_shards (LIKE timeout_center.shards);
WITH moved AS (DELETE FROM timeout_center.shards WHERE state = 'done' RETURNING *)
INSERT INTO timeout_center.old_shards SELECT * FROM moved;`),
    ).toEqual(['unbatched-write']);
    // Tables sized by the config are fine to update in a migration.
    expect(await rulesOf("UPDATE timeout_center.kinds SET description = 'x' WHERE description IS NULL;")).toEqual([]);
  });

  it('work-under-lock: a full read of a growing table while the transaction holds an ALTER TABLE lock', async () => {
    expect(
      await rulesOf(`ALTER TABLE timeout_center.timeouts ADD COLUMN note text;
CREATE TABLE timeout_center.timeouts_copy AS SELECT * FROM timeout_center.timeouts;`),
    ).toEqual(['work-under-lock']);
    expect(
      await rulesOf(`ALTER TABLE timeout_center.kinds ADD COLUMN note text;
CREATE TABLE timeout_center.history (id bigint, kind text);
INSERT INTO timeout_center.history SELECT id, kind FROM timeout_center.done_timeouts;`),
    ).toEqual(['work-under-lock']);
    expect(
      await rulesOf(
        'ALTER TABLE timeout_center.timeouts ADD COLUMN note text;',
        'CREATE TABLE timeout_center.timeouts_copy AS SELECT * FROM timeout_center.timeouts;',
      ),
    ).toEqual([]);
  });

  it('do-block: statements the checker cannot see', async () => {
    expect(await rulesOf("DO $$ BEGIN EXECUTE 'LOCK TABLE timeout_center.timeouts'; END $$;")).toEqual(['do-block']);
  });

  it('directive: an unknown, misplaced or unused tc: directive', async () => {
    // A misspelled no-transaction would run the file in one transaction: named, not ignored.
    expect(await rulesOf('-- tc:no-transactions\nSELECT 1;\n')).toEqual(['directive']);
    expect(await rulesOf('-- tc:oldest-code 1.1\nSELECT 1;\n')).toEqual(['directive', 'directive']);
    expect(await rulesOf('-- tc:oldest-code 1.1.0 please\nSELECT 1;\n')).toEqual(['directive']);
    // Indented, the runner does not see it: the file would run in one transaction.
    expect(await rulesOf('--\n  -- tc:no-transaction\nSELECT 1;\n')).toEqual(['directive']);
    expect(await rulesOf('SELECT 1;\n-- tc:no-transaction\nSELECT 2;\n')).toEqual(['directive']);
    expect(await rulesOf('-- tc:unread-since 1.0.0 timeout_center.timeouts.payload\nSELECT 1;\n')).toEqual(['directive']);
  });

  it('syntax: a file PostgreSQL cannot parse', async () => {
    const [v, ...rest] = await check('-- 0024\nALTER TABLE timeout_center.timeouts ADD COLUM note text;\n');
    expect(rest).toEqual([]);
    expect(v).toMatchObject({ rule: 'syntax', line: 2 });
  });

  it('the fixtures in test/fixtures/unsafe-migrations each break the rule their name says, once', async () => {
    const files = readdirSync(FIXTURES).filter((f) => f.endsWith('.sql'));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const rule = f.replace(/\.sql$/, '') as RuleId;
      expect(Object.keys(RULES), f).toContain(rule);
      expect(await rulesOf(readFileSync(`${FIXTURES}/${f}`, 'utf8')), f).toEqual([rule]);
    }
  });
});

describe('docs/writing-migrations.md', () => {
  const guide = readFileSync(GUIDE, 'utf8');
  const blocks = (lang: string) => [...guide.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]!);

  it('its examples pass the rules, as consecutive migrations after 0023', async () => {
    const examples = blocks('sql');
    expect(examples.length).toBeGreaterThan(3);
    expect((await check(...examples)).map(formatViolation).join('\n\n')).toBe('');
  });

  it('the message it shows is what the checker says', async () => {
    const sql = readFileSync(`${FIXTURES}/index-concurrently.sql`, 'utf8');
    const [v] = await checkMigrations([...before1, { file: 'sql/0024_timeouts_by_created.sql', sql }]);
    expect(blocks('text')[0]!.trim()).toBe(formatViolation(v!).replace('0024', 'NNNN'));
  });
});
