// The migration files' directives and statements (src/db/migrations.ts) and the schema
// contract's verdicts (src/release/schema-contract.ts), without a database.
import { describe, expect, it } from 'vitest';
import { concurrentIndex, listMigrations, oldestCodeFor, parseMigration, splitStatements, waitsHarmlessly } from '../../src/db/migrations.js';
import { judgeSchema } from '../../src/release/schema-contract.js';
import { versionedApplicationName } from '../../src/release/fleet.js';

describe('migration files', () => {
  it('reads -- tc:no-transaction and -- tc:oldest-code, and refuses a floor that is not a version', () => {
    const m = parseMigration(
      '0031_index.sql',
      '-- 0031_index: an index\n-- tc:no-transaction\n-- tc:oldest-code 1.2.0\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON s.t (c);\n',
    );
    expect(m).toMatchObject({ version: 31, name: '0031_index', transactional: false, oldestCode: '1.2.0' });
    expect(parseMigration('0032_x.sql', 'SELECT 1;')).toMatchObject({ transactional: true });
    expect(parseMigration('0032_x.sql', 'SELECT 1;').oldestCode).toBeUndefined();
    expect(() => parseMigration('0033_bad.sql', '-- tc:oldest-code soon\nSELECT 1;')).toThrow(/0033_bad.sql: "-- tc:oldest-code soon" is not a version/);
  });

  it('the floor only rises: the highest oldest-code of the migrations applied, else the code before 1.0.0', () => {
    const ms = [
      parseMigration('0001_a.sql', 'SELECT 1;'),
      parseMigration('0002_b.sql', '-- tc:oldest-code 1.4.0\n'),
      parseMigration('0003_c.sql', '-- tc:oldest-code 1.1.0\n'),
    ];
    expect(oldestCodeFor(ms.slice(0, 1))).toBe('0.1.0');
    expect(oldestCodeFor(ms)).toBe('1.4.0');
  });

  it('splits a no-transaction file into its statements, comments kept inside, comment-only pieces dropped', () => {
    const sql =
      '-- header\n-- tc:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON s.t (x);\n\n-- why b\nCREATE INDEX CONCURRENTLY IF NOT EXISTS b\n  ON s.t (y); -- trailing\n-- the end\n';
    expect(splitStatements(sql)).toEqual([
      '-- header\n-- tc:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON s.t (x)',
      '-- why b\nCREATE INDEX CONCURRENTLY IF NOT EXISTS b\n  ON s.t (y)',
    ]);
  });

  it('finds the index a concurrent build names, and which statements may wait without a lock_timeout', () => {
    expect(concurrentIndex('-- c\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS one_live ON timeout_center.timeouts (kind, biz_id)')).toEqual({
      schema: 'timeout_center',
      name: 'one_live',
    });
    expect(concurrentIndex('CREATE INDEX CONCURRENTLY x ON t (a)')).toBeUndefined(); // without IF NOT EXISTS: not re-runnable
    expect(waitsHarmlessly('-- c\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON s.t (x)')).toBe(true);
    expect(waitsHarmlessly('ALTER TABLE s.t VALIDATE CONSTRAINT c')).toBe(true);
    expect(waitsHarmlessly('ALTER TABLE s.t ADD COLUMN c int')).toBe(false);
  });

  it('every migration in sql/ parses, and none raises the floor above the release it ships in', () => {
    const all = listMigrations();
    expect(all.length).toBeGreaterThan(0);
    expect(oldestCodeFor(all)).toBe('0.1.0'); // 1.0.0 keeps the code before it running (docs/upgrading.md)
  });
});

describe('schema contract verdicts', () => {
  const build = { version: '1.2.0', schemaVersion: 30 };
  it('missing, older, current, newer and compatible, newer and incompatible', () => {
    expect(judgeSchema(null, build)).toMatchObject({ ok: false, state: 'missing' });
    expect(judgeSchema({ schemaVersion: 29, oldestCode: '0.1.0', migratedBy: '1.1.0' }, build)).toMatchObject({
      ok: false,
      state: 'older',
      message: expect.stringMatching(/migration 0029, migrated by timeout-center 1\.1\.0; timeout-center 1\.2\.0 needs 0030\. Run `timeout-center migrate`/),
    });
    expect(judgeSchema({ schemaVersion: 30, oldestCode: '1.0.0', migratedBy: '1.2.0' }, build)).toMatchObject({ ok: true, state: 'current' });
    expect(judgeSchema({ schemaVersion: 34, oldestCode: '1.2.0', migratedBy: '1.3.0' }, build)).toMatchObject({ ok: true, state: 'newer' });
    expect(judgeSchema({ schemaVersion: 34, oldestCode: '1.3.0', migratedBy: '1.3.0' }, build)).toMatchObject({
      ok: false,
      state: 'incompatible',
      message: expect.stringMatching(/needs timeout-center 1\.3\.0 or newer; this is 1\.2\.0\. Run timeout-center 1\.3\.0 or newer/),
    });
  });

  it('application names carry the version, so pg_stat_activity tells the code before 1.0.0 apart', () => {
    expect(versionedApplicationName('timeout-center worker (store eu)', '1.0.0')).toBe('timeout-center/1.0.0 worker (store eu)');
    expect(versionedApplicationName('payer', '1.0.0')).toBe('payer');
  });
});
