// The rules of an online migration, checked on PostgreSQL's own parse tree (libpg-query: the
// server's parser compiled to WebAssembly; a devDependency, so only tests and scripts use this
// module). A migration numbered above LAST_BEFORE_1_0 must be safe on a 100-million-row table
// under load and keep the previous release running on the new schema (docs/upgrading.md).
//
// The checker reads every migration in order, the old ones too, to know what exists: a table
// created in the same file may be indexed and constrained plainly (nobody else writes it yet),
// a SET NOT NULL needs a CHECK (col IS NOT NULL) validated by an earlier migration, and the
// oldest-code floor comes from every earlier file. Only files numbered above LAST_BEFORE_1_0 are
// judged.
//
// What it cannot see: statements inside a DO block or a function that a statement calls (a DO
// block is refused for that reason; a SELECT of a function that runs DDL is not detected).
import { parse, type ParseResult, type RawStmt } from 'libpg-query';
import semver from 'semver';
import { parseMigration, PRE_RELEASE_CODE, splitStatements } from '../../src/db/migrations.ts';

/** 0023 is the last migration of the code before 1.0.0; the rules hold from 0024 on. */
export const LAST_BEFORE_1_0 = 23;

export type RuleId =
  | 'index-concurrently'
  | 'concurrently-in-transaction'
  | 'no-transaction-idempotent'
  | 'no-transaction-split'
  | 'constraint-not-valid'
  | 'unique-using-index'
  | 'validate-separately'
  | 'column-type'
  | 'volatile-default'
  | 'set-not-null'
  | 'drop-or-rename'
  | 'lock-table'
  | 'table-rewrite'
  | 'unbatched-write'
  | 'work-under-lock'
  | 'do-block'
  | 'directive'
  | 'syntax';

export interface RuleViolation {
  /** as given, e.g. sql/0024_x.sql */
  file: string;
  /** 1-based line of the statement's first token */
  line: number;
  /** the statement's first line (shortened) */
  statement: string;
  rule: RuleId;
  problem: string;
  /** how to write it safely */
  safe: string;
}

export interface MigrationSource {
  /** path shown in messages; its name starts with the 4-digit number (sql/0024_name.sql) */
  file: string;
  sql: string;
}

/** Tables sized by the config, not by traffic (a few rows per kind, target, store or worker). A
 *  write to any other table of the center (timeouts, done_timeouts, shards, scans, audit_log, a
 *  table added later) is treated as a write to a table that grows with traffic. */
export const SMALL_TABLES = new Set([
  'kinds',
  'kind_routes',
  'kind_stores',
  'targets',
  'coordinator_lease',
  'store_identity',
  'workers',
  'circuit_breakers',
  'migrations',
]);

/** Functions PostgreSQL marks VOLATILE that a default might call: such a default makes
 *  ADD COLUMN rewrite the table (each row gets its own value). now(), CURRENT_TIMESTAMP and
 *  statement_timestamp() are STABLE: one value stored in the catalog, no rewrite (PostgreSQL 11+). */
const VOLATILE_FUNCTIONS = new Set([
  'clock_timestamp',
  'timeofday',
  'random',
  'random_normal',
  'gen_random_uuid',
  'uuid_generate_v1',
  'uuid_generate_v1mc',
  'uuid_generate_v4',
  'uuidv4',
  'uuidv7',
  'nextval',
  'setval',
  'currval',
  'lastval',
  'txid_current',
  'pg_current_xact_id',
  'gen_random_bytes',
]);

/** Functions known not to be volatile, accepted in a default. Any other function call is refused
 *  (the checker cannot look its volatility up without a database). */
const STABLE_FUNCTIONS = new Set([
  'now',
  'statement_timestamp',
  'transaction_timestamp',
  'current_setting',
  'jsonb_build_object',
  'json_build_object',
  'jsonb_build_array',
  'array_fill',
  'make_interval',
  'timezone',
  'to_timestamp',
  'lower',
  'upper',
  'coalesce',
]);

export const RULES: Record<RuleId, string> = {
  'index-concurrently': 'indexes on an existing table are built and dropped CONCURRENTLY',
  'concurrently-in-transaction': 'CONCURRENTLY runs only in a `-- tc:no-transaction` file',
  'no-transaction-idempotent': 'every statement of a `-- tc:no-transaction` file can run again after a crash',
  'no-transaction-split': 'a `-- tc:no-transaction` file splits into its statements on a `;` at the end of a line',
  'constraint-not-valid': 'a CHECK or FOREIGN KEY on an existing table is added NOT VALID, validated in a later migration',
  'unique-using-index': 'a UNIQUE or PRIMARY KEY on an existing table comes from an index built CONCURRENTLY',
  'validate-separately': 'VALIDATE CONSTRAINT runs in a migration of its own',
  'column-type': 'no column type change on an existing table',
  'volatile-default': 'no volatile default (or identity, serial, stored generated column) added to an existing table',
  'set-not-null': 'SET NOT NULL only after a validated CHECK (col IS NOT NULL)',
  'drop-or-rename': 'nothing the previous release reads is dropped or renamed',
  'lock-table': 'no explicit LOCK TABLE',
  'table-rewrite': 'no table rewrite (VACUUM FULL, CLUSTER, SET TABLESPACE, SET LOGGED/UNLOGGED)',
  'unbatched-write': 'no UPDATE, DELETE or INSERT ... SELECT over a table that grows with traffic',
  'work-under-lock': 'no full read of a growing table after an ALTER TABLE in the same transaction',
  'do-block': 'no DO block (its statements cannot be checked)',
  directive: 'header directives are known, well formed and true',
  syntax: 'the file parses',
};

/** One line per violation: where, which rule, what is wrong, how to write it. */
export function formatViolation(v: RuleViolation): string {
  return `${v.file}:${v.line}: ${v.statement}\n  rule ${v.rule} (${RULES[v.rule]}): ${v.problem}\n  safe: ${v.safe}`;
}

// Directives -----------------------------------------------------------------------------------

export interface Directives {
  noTransaction: boolean;
  oldestCode?: string;
  /** `-- tc:unread-since X.Y.Z schema.table[.column]`: nothing of release X.Y.Z or later reads it */
  unreadSince: { version: string; object: string; line: number }[];
  /** problems found while reading them */
  problems: { line: number; text: string; problem: string; safe: string }[];
}

const OBJECT = /^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/;

/**
 * The `-- tc:...` directives. no-transaction and oldest-code are read by the runner's own
 * parseMigration (src/db/migrations.ts), so the checker judges the file as the runner will run it;
 * what the runner would take silently (an unknown, misspelt or indented directive, one below the
 * leading comment block) is reported here.
 */
export function readDirectives(file: string, sql: string): Directives {
  const out: Directives = { noTransaction: false, unreadSince: [], problems: [] };
  try {
    const runner = parseMigration(file.split('/').at(-1)!, sql);
    out.noTransaction = !runner.transactional;
    if (runner.oldestCode !== undefined) out.oldestCode = runner.oldestCode;
  } catch (err) {
    // The runner refuses the file (an oldest-code that is not a version): so does the checker.
    out.noTransaction = /^--\s*tc:no-transaction\s*$/m.test(sql);
    out.problems.push({ line: 1, text: file, problem: `the runner refuses it: ${(err as Error).message}`, safe: 'write the version as X.Y.Z' });
  }
  let inHeader = true;
  sql.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (inHeader && line !== '' && !line.startsWith('--')) inHeader = false;
    const m = /^--\s*tc:(\S*)\s*(.*)$/.exec(line);
    if (!m) return;
    const [, name, rest] = m as unknown as [string, string, string];
    const at = { line: i + 1, text: line };
    if (!inHeader) {
      out.problems.push({
        ...at,
        problem: 'a tc: directive below the first statement, where a reader of the file does not look for it',
        safe: 'move it into the comment block at the top of the file',
      });
      return;
    }
    const args = rest.split(/\s+/).filter(Boolean);
    const atLineStart = raw.startsWith('--');
    if (atLineStart && name === 'no-transaction' && args.length === 0) return;
    if (atLineStart && name === 'oldest-code' && args.length === 1 && semver.valid(args[0]!) !== null) return;
    if (atLineStart && name === 'unread-since' && args.length === 2 && semver.valid(args[0]!) !== null && OBJECT.test(args[1]!)) {
      out.unreadSince.push({ version: args[0]!, object: args[1]!, line: i + 1 });
      return;
    }
    out.problems.push({
      ...at,
      problem: `${atLineStart ? 'unknown or malformed' : 'indented (the runner reads a directive only at the start of a line)'} directive tc:${name}${rest ? ` ${rest}` : ''}`,
      safe: 'the directives are `-- tc:no-transaction`, `-- tc:oldest-code X.Y.Z` and `-- tc:unread-since X.Y.Z schema.table[.column]`, each alone on its line, from its first column (docs/writing-migrations.md)',
    });
  });
  return out;
}

// Positions ------------------------------------------------------------------------------------

/** libpg-query gives byte offsets into the UTF-8 text; lines are counted on those bytes. */
class Source {
  private readonly bytes: Buffer;
  constructor(readonly sql: string) {
    this.bytes = Buffer.from(sql, 'utf8');
  }

  /** The statement's text without its leading blank lines and comments, and its first line. */
  statement(stmt: RawStmt): { text: string; line: number } {
    const start = stmt.stmt_location ?? 0;
    const end = stmt.stmt_len ? start + stmt.stmt_len : this.bytes.length;
    let text = this.bytes.subarray(start, end).toString('utf8');
    let skipped = this.bytes.subarray(0, start).toString('utf8');
    for (;;) {
      const m = /^(\s+|--[^\n]*(\n|$)|\/\*[\s\S]*?\*\/)/.exec(text);
      if (!m || m[0].length === 0) break;
      skipped += m[0];
      text = text.slice(m[0].length);
    }
    return { text, line: skipped.split('\n').length };
  }
}

// The checker -----------------------------------------------------------------------------------

type Obj = Record<string, unknown>;

function nodeOf(n: unknown): [string, Obj] | undefined {
  if (!n || typeof n !== 'object') return undefined;
  const entries = Object.entries(n as Obj);
  if (entries.length !== 1) return undefined;
  const [type, body] = entries[0]!;
  return body && typeof body === 'object' ? [type, body as Obj] : undefined;
}

function list(v: unknown): unknown[] {
  return Array.isArray(v) ? v : [];
}

function str(v: unknown): string | undefined {
  const n = nodeOf(v);
  return n && n[0] === 'String' ? (n[1]['sval'] as string | undefined) : undefined;
}

function relName(rv: unknown): string {
  const r = (rv ?? {}) as Obj;
  return `${(r['schemaname'] as string | undefined) ?? 'timeout_center'}.${r['relname'] as string}`;
}

/** A dotted name from a list of String nodes (DROP's objects, a function's name). */
function dotted(names: unknown[]): string {
  const parts = names.map(str).filter((s): s is string => s !== undefined);
  return parts.length === 1 ? `timeout_center.${parts[0]}` : parts.join('.');
}

function isCenter(qualified: string): boolean {
  return qualified.startsWith('timeout_center.');
}

function tableOnly(qualified: string): string {
  return qualified.split('.').at(-1)!;
}

/** Every function name called anywhere inside an expression tree. */
function calledFunctions(expr: unknown, out: string[] = []): string[] {
  if (Array.isArray(expr)) {
    for (const e of expr) calledFunctions(e, out);
    return out;
  }
  if (!expr || typeof expr !== 'object') return out;
  for (const [k, v] of Object.entries(expr as Obj)) {
    if (k === 'FuncCall') {
      const names = list((v as Obj)['funcname']).map(str);
      out.push(names.at(-1) ?? '?');
    }
    calledFunctions(v, out);
  }
  return out;
}

/** The column a CHECK proves not null: CHECK (col IS NOT NULL). */
function notNullColumn(expr: unknown): string | undefined {
  const n = nodeOf(expr);
  if (!n || n[0] !== 'NullTest' || n[1]['nulltesttype'] !== 'IS_NOT_NULL') return undefined;
  const arg = nodeOf(n[1]['arg']);
  if (!arg || arg[0] !== 'ColumnRef') return undefined;
  return list(arg[1]['fields']).map(str).at(-1);
}

interface Knowledge {
  tables: Set<string>;
  /** 'schema.table:constraint' -> what it proves */
  checks: Map<string, { table: string; notNull?: string; valid: boolean }>;
  oldestCode: string;
}

interface FileState {
  file: string;
  version: number;
  directives: Directives;
  createdTables: Set<string>;
  createdIndexes: Set<string>;
  /** views and functions (by name) this file creates: a DROP of one of them, recreated in the same transaction, is a replacement */
  recreated: Set<string>;
  alteredTables: Set<string>;
  addedConstraints: Set<string>;
  usedUnread: Set<string>;
}

function versionOf(file: string): number {
  const m = /(?:^|\/)(\d{4})_[^/]*$/.exec(file);
  if (!m) throw new Error(`${file}: a migration's name starts with its 4-digit number (sql/NNNN_name.sql)`);
  return Number(m[1]);
}

/**
 * Checks migrations in order (all of them, oldest first: the old ones teach the checker what
 * exists); returns the violations of those numbered above `judgeAbove` (default LAST_BEFORE_1_0).
 */
export async function checkMigrations(files: MigrationSource[], options: { judgeAbove?: number } = {}): Promise<RuleViolation[]> {
  const judgeAbove = options.judgeAbove ?? LAST_BEFORE_1_0;
  const known: Knowledge = { tables: new Set(), checks: new Map(), oldestCode: PRE_RELEASE_CODE };
  const violations: RuleViolation[] = [];
  const sorted = [...files].sort((a, b) => versionOf(a.file) - versionOf(b.file));
  for (const f of sorted) {
    const judged = versionOf(f.file) > judgeAbove;
    const found = await checkOne(f, known);
    if (judged) violations.push(...found);
  }
  return violations;
}

/** Parse trees by text: a test checks the same old migrations under many fixtures. */
const trees = new Map<string, Promise<ParseResult>>();
function parsed(sql: string): Promise<ParseResult> {
  let t = trees.get(sql);
  if (!t) {
    t = parse(sql);
    trees.set(sql, t);
  }
  return t;
}

async function checkOne(f: MigrationSource, known: Knowledge): Promise<RuleViolation[]> {
  const out: RuleViolation[] = [];
  const directives = readDirectives(f.file, f.sql);
  const source = new Source(f.sql);
  const state: FileState = {
    file: f.file,
    version: versionOf(f.file),
    directives,
    createdTables: new Set(),
    createdIndexes: new Set(),
    recreated: new Set(),
    alteredTables: new Set(),
    addedConstraints: new Set(),
    usedUnread: new Set(),
  };
  for (const p of directives.problems) {
    out.push({ file: f.file, line: p.line, statement: p.text, rule: 'directive', problem: p.problem, safe: p.safe });
  }
  if (directives.oldestCode && semver.gt(directives.oldestCode, known.oldestCode)) known.oldestCode = directives.oldestCode;

  let tree: ParseResult;
  try {
    tree = await parsed(f.sql);
  } catch (err) {
    const e = err as Error & { sqlDetails?: { cursorPosition?: number } };
    const pos = e.sqlDetails?.cursorPosition ?? 0;
    const line = Buffer.from(f.sql, 'utf8').subarray(0, pos).toString('utf8').split('\n').length;
    out.push({
      file: f.file,
      line,
      statement: f.sql.split('\n')[line - 1]?.trim() ?? '',
      rule: 'syntax',
      problem: `PostgreSQL's parser refuses it: ${e.message}`,
      safe: 'fix the SQL; the file must parse before it can be checked',
    });
    return out;
  }
  const stmts = tree.stmts ?? [];

  // First pass: what the file creates (a DROP of a view or function it recreates is a replacement).
  for (const raw of stmts) {
    const n = nodeOf(raw.stmt);
    if (!n) continue;
    const [type, s] = n;
    if (type === 'ViewStmt') state.recreated.add(relName(s['view']));
    if (type === 'CreateFunctionStmt') state.recreated.add(dotted(list(s['funcname'])));
  }

  if (directives.noTransaction) {
    const pieces = splitStatements(f.sql);
    if (pieces.length !== stmts.length) {
      out.push({
        file: f.file,
        line: 1,
        statement: '-- tc:no-transaction',
        rule: 'no-transaction-split',
        problem: `the runner splits this file on a ';' at the end of a line into ${pieces.length} piece(s), PostgreSQL's parser finds ${stmts.length} statement(s): a DO block or function body, or two statements on one line`,
        safe: 'one statement per piece, each ending with ; at the end of its line; no DO blocks or function bodies in a no-transaction file (put them in a transactional migration)',
      });
    }
  }

  for (const raw of stmts) {
    const { text, line } = source.statement(raw);
    const firstLine = text.split('\n')[0]!.trim();
    const statement = firstLine.length > 120 ? `${firstLine.slice(0, 117)}...` : firstLine;
    const flag = (rule: RuleId, problem: string, safe: string) => out.push({ file: f.file, line, statement, rule, problem, safe });
    checkStatement(raw, state, known, flag);
  }

  for (const u of directives.unreadSince) {
    if (!state.usedUnread.has(u.object)) {
      out.push({
        file: f.file,
        line: u.line,
        statement: `-- tc:unread-since ${u.version} ${u.object}`,
        rule: 'directive',
        problem: `the directive names ${u.object}, which this file neither drops nor renames`,
        safe: 'remove the directive, or name the object exactly as the statement does (schema.table or schema.table.column)',
      });
    }
  }
  return out;
}

type Flag = (rule: RuleId, problem: string, safe: string) => void;

const CONCURRENT_INDEX_SAFE =
  'CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON ... in a migration of its own headed `-- tc:no-transaction` (writes go on while it builds)';

function checkStatement(raw: RawStmt, st: FileState, known: Knowledge, flag: Flag): void {
  const n = nodeOf(raw.stmt);
  if (!n) return;
  const [type, s] = n;
  const existing = (table: string) => known.tables.has(table) && !st.createdTables.has(table);
  const noTx = st.directives.noTransaction;
  const notIdempotent = (what: string, safe: string) =>
    flag(
      'no-transaction-idempotent',
      `${what}: this file runs statement by statement outside a transaction, and a run that crashed halfway runs it again`,
      safe,
    );

  switch (type) {
    case 'CreateStmt': {
      const table = relName(s['relation']);
      if (noTx && !s['if_not_exists']) notIdempotent('CREATE TABLE without IF NOT EXISTS', 'CREATE TABLE IF NOT EXISTS ...');
      known.tables.add(table);
      st.createdTables.add(table);
      for (const elt of list(s['tableElts'])) {
        const c = nodeOf(elt);
        if (c?.[0] === 'Constraint') recordCheck(c[1], table, known, st);
        if (c?.[0] === 'ColumnDef')
          for (const cc of list(c[1]['constraints'])) if (nodeOf(cc)?.[0] === 'Constraint') recordCheck(nodeOf(cc)![1], table, known, st);
      }
      return;
    }
    case 'CreateTableAsStmt': {
      const into = (s['into'] ?? {}) as Obj;
      const table = relName(into['rel']);
      if (noTx && !s['if_not_exists']) notIdempotent('CREATE TABLE AS without IF NOT EXISTS', 'CREATE TABLE IF NOT EXISTS ... AS ...');
      checkReadUnderLock(s['query'], 'CREATE TABLE AS', st, known, flag);
      known.tables.add(table);
      st.createdTables.add(table);
      return;
    }
    case 'IndexStmt': {
      const table = relName(s['relation']);
      const name = s['idxname'] as string | undefined;
      if (name) st.createdIndexes.add(name);
      if (!s['concurrent'] && existing(table)) {
        flag(
          'index-concurrently',
          `CREATE INDEX on ${table}, a table that exists before this migration, takes a SHARE lock: every INSERT, UPDATE and DELETE of it waits until the whole index is built (minutes at 100M rows)`,
          CONCURRENT_INDEX_SAFE,
        );
      }
      if (s['concurrent'] && !noTx) {
        flag(
          'concurrently-in-transaction',
          'CREATE INDEX CONCURRENTLY cannot run inside a transaction block, and this file runs in one',
          'put it in a migration of its own whose header has `-- tc:no-transaction`',
        );
      }
      if (noTx && !s['if_not_exists'])
        notIdempotent(
          'CREATE INDEX without IF NOT EXISTS',
          'CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON ... (the runner rebuilds an INVALID one)',
        );
      return;
    }
    case 'ReindexStmt': {
      const concurrent = list(s['params']).some((p) => (nodeOf(p)?.[1]['defname'] as string | undefined) === 'concurrently');
      if (!concurrent)
        flag(
          'index-concurrently',
          'REINDEX without CONCURRENTLY blocks every write to the table (and reads that use the index) until it is done',
          'REINDEX INDEX CONCURRENTLY name in a migration headed `-- tc:no-transaction`',
        );
      else if (!noTx)
        flag(
          'concurrently-in-transaction',
          'REINDEX CONCURRENTLY cannot run inside a transaction block, and this file runs in one',
          'put it in a migration of its own whose header has `-- tc:no-transaction`',
        );
      return;
    }
    case 'DropStmt':
      return checkDrop(s, st, known, flag, notIdempotent);
    case 'AlterTableStmt':
      return checkAlterTable(s, st, known, flag, notIdempotent);
    case 'RenameStmt': {
      const renameType = s['renameType'] as string;
      let object: string | undefined;
      if (renameType === 'OBJECT_COLUMN') object = `${relName(s['relation'])}.${s['subname'] as string}`;
      else if (['OBJECT_TABLE', 'OBJECT_VIEW', 'OBJECT_MATVIEW'].includes(renameType)) object = relName(s['relation']);
      if (noTx) notIdempotent('a RENAME', 'a rename cannot be repeated: put it in a transactional migration');
      if (object && isCenter(object)) {
        const table = renameType === 'OBJECT_COLUMN' ? relName(s['relation']) : object;
        if (known.tables.has(table) && !st.createdTables.has(table)) contract(object, 'renames', st, known, flag);
        if (renameType !== 'OBJECT_COLUMN' && known.tables.has(object)) {
          // The table goes on under its new name; one this file created stays this file's own.
          const renamed = `${object.split('.')[0]}.${s['newname'] as string}`;
          known.tables.delete(object);
          known.tables.add(renamed);
          if (st.createdTables.has(object)) st.createdTables.add(renamed);
        }
      }
      return;
    }
    case 'TruncateStmt':
      for (const rel of list(s['relations'])) {
        const table = relName(nodeOf(rel)?.[1]);
        if (existing(table) && isCenter(table)) contract(table, 'truncates', st, known, flag);
      }
      return;
    case 'LockStmt':
      flag(
        'lock-table',
        'an explicit LOCK TABLE holds its lock until the migration commits, and every statement after it runs under it; ACCESS EXCLUSIVE stops every reader and writer of the table, and even a weaker mode queues them behind it',
        "leave locking to each statement (each takes the weakest lock it needs, under the runner's lock_timeout); to rebuild a table, expand instead: add the new column or table, write both, backfill in batches outside the migration, switch readers a release later",
      );
      return;
    case 'VacuumStmt': {
      const full = list(s['options']).some((o) => (nodeOf(o)?.[1]['defname'] as string | undefined) === 'full');
      if (full)
        flag(
          'table-rewrite',
          'VACUUM FULL rewrites the table under an ACCESS EXCLUSIVE lock: no reads or writes until the copy is done',
          'leave space reclaim to autovacuum; to shrink a bloated table online, an operator runs pg_repack (docs/operations.md), not a migration',
        );
      if (!noTx && s['is_vacuumcmd'])
        flag(
          'concurrently-in-transaction',
          'VACUUM cannot run inside a transaction block',
          'put it in a migration headed `-- tc:no-transaction`, or leave it to autovacuum',
        );
      return;
    }
    case 'ClusterStmt':
      flag(
        'table-rewrite',
        'CLUSTER rewrites the table in index order under an ACCESS EXCLUSIVE lock: no reads or writes until the copy is done',
        'leave physical order alone in a migration; an operator runs pg_repack --order-by online if it matters',
      );
      return;
    case 'UpdateStmt':
    case 'DeleteStmt':
    case 'InsertStmt':
      return checkWrite(type, s, st, known, flag, noTx, notIdempotent);
    case 'DoStmt':
      flag(
        'do-block',
        'a DO block runs statements the checker cannot see (and dynamic SQL it cannot know)',
        'write each statement as plain SQL in the file, where it is checked; data a statement needs can come from a SELECT inside it',
      );
      return;
    case 'CreateFunctionStmt':
      if (noTx && !s['replace']) notIdempotent('CREATE FUNCTION without OR REPLACE', 'CREATE OR REPLACE FUNCTION ...');
      return;
    case 'ViewStmt':
      if (noTx && !s['replace']) notIdempotent('CREATE VIEW without OR REPLACE', 'CREATE OR REPLACE VIEW ...');
      return;
    case 'CreateTrigStmt':
      if (noTx && !s['replace']) notIdempotent('CREATE TRIGGER without OR REPLACE', 'CREATE OR REPLACE TRIGGER ...');
      return;
    case 'CreateSchemaStmt':
    case 'CreateSeqStmt':
    case 'CreateExtensionStmt':
      if (noTx && !s['if_not_exists']) notIdempotent(`${type.replace(/Stmt$/, '')} without IF NOT EXISTS`, 'add IF NOT EXISTS');
      return;
    case 'AlterEnumStmt':
      if (noTx && s['newVal'] && !s['skipIfNewValExists'])
        notIdempotent('ALTER TYPE ... ADD VALUE without IF NOT EXISTS', 'ALTER TYPE ... ADD VALUE IF NOT EXISTS ...');
      if (noTx && s['oldVal']) notIdempotent('ALTER TYPE ... RENAME VALUE', 'put the rename in a transactional migration');
      return;
    case 'CommentStmt':
    case 'GrantStmt':
    case 'GrantRoleStmt':
    case 'AlterDefaultPrivilegesStmt':
    case 'SelectStmt':
    case 'VariableSetStmt':
      return;
    default:
      if (noTx)
        notIdempotent(
          `a ${type.replace(/Stmt$/, '')} statement the checker cannot prove repeatable`,
          'use a form with IF NOT EXISTS / IF EXISTS / OR REPLACE, or move it to a transactional migration',
        );
  }
}

function recordCheck(c: Obj, table: string, known: Knowledge, st: FileState): void {
  if (c['contype'] !== 'CONSTR_CHECK') return;
  const key = `${table}:${(c['conname'] as string | undefined) ?? `(unnamed check ${known.checks.size})`}`;
  const col = notNullColumn(c['raw_expr']);
  known.checks.set(key, { table, ...(col ? { notNull: col } : {}), valid: !c['skip_validation'] });
  st.addedConstraints.add(key);
}

/** A drop, rename or truncate of something the previous release may read: allowed only with a
 *  `-- tc:unread-since X.Y.Z object` directive whose X.Y.Z the oldest-code floor has reached. */
function contract(object: string, verb: string, st: FileState, known: Knowledge, flag: Flag): void {
  const d = st.directives.unreadSince.find((u) => u.object === object);
  if (!d) {
    flag(
      'drop-or-rename',
      `this ${verb} ${object}, which the previous release reads: rolled back or still running during the upgrade, it fails on the new schema`,
      `expand now, contract a release later: stop reading ${object} in release X.Y.Z, then in a later release drop it with a header \`-- tc:unread-since X.Y.Z ${object}\` and \`-- tc:oldest-code X.Y.Z\` (no running code older than X.Y.Z may start on the schema). A rename is an add, a copy written by both names, and a drop`,
    );
    return;
  }
  st.usedUnread.add(object);
  if (semver.lt(known.oldestCode, d.version)) {
    flag(
      'drop-or-rename',
      `-- tc:unread-since ${d.version} ${object}: code older than ${d.version} still reads it, and the oldest code allowed on the schema is ${known.oldestCode}`,
      `raise the floor in this file's header: -- tc:oldest-code ${d.version} (a release ${d.version} or later must already be running everywhere)`,
    );
  }
}

function checkDrop(s: Obj, st: FileState, known: Knowledge, flag: Flag, notIdempotent: (w: string, safe: string) => void): void {
  const removeType = s['removeType'] as string;
  const objects = list(s['objects']);
  if (noTxOf(st) && !s['missing_ok']) notIdempotent(`DROP without IF EXISTS`, 'DROP ... IF EXISTS ...');
  if (removeType === 'OBJECT_INDEX') {
    for (const o of objects) {
      const plainName = tableOnly(objectName(o) ?? '?');
      if (!s['concurrent'] && !st.createdIndexes.has(plainName)) {
        flag(
          'index-concurrently',
          `DROP INDEX ${plainName} without CONCURRENTLY takes an ACCESS EXCLUSIVE lock on its table until the migration commits (and queues every reader behind any long query)`,
          'DROP INDEX CONCURRENTLY IF EXISTS name in a migration headed `-- tc:no-transaction`',
        );
      }
      if (s['concurrent'] && !noTxOf(st))
        flag(
          'concurrently-in-transaction',
          'DROP INDEX CONCURRENTLY cannot run inside a transaction block',
          'put it in a migration of its own whose header has `-- tc:no-transaction`',
        );
    }
    return;
  }
  if (['OBJECT_TABLE', 'OBJECT_VIEW', 'OBJECT_MATVIEW', 'OBJECT_FUNCTION', 'OBJECT_PROCEDURE', 'OBJECT_TYPE'].includes(removeType)) {
    for (const o of objects) {
      const object = objectName(o);
      if (!object || !isCenter(object)) continue;
      if (removeType === 'OBJECT_TABLE') {
        if (!known.tables.has(object) || st.createdTables.has(object)) continue;
        contract(object, 'drops', st, known, flag);
        known.tables.delete(object);
        continue;
      }
      // A view or function dropped and created again in the same transaction is replaced at
      // once for every reader.
      if (st.recreated.has(object) && !noTxOf(st)) continue;
      contract(object, 'drops', st, known, flag);
    }
  }
}

function noTxOf(st: FileState): boolean {
  return st.directives.noTransaction;
}

function objectName(o: unknown): string | undefined {
  const n = nodeOf(o);
  if (!n) return undefined;
  if (n[0] === 'List') return dotted(list(n[1]['items']));
  if (n[0] === 'ObjectWithArgs') return dotted(list(n[1]['objname']));
  if (n[0] === 'TypeName') return dotted(list(n[1]['names']));
  if (n[0] === 'String') return dotted([o]);
  return undefined;
}

function checkAlterTable(s: Obj, st: FileState, known: Knowledge, flag: Flag, notIdempotent: (w: string, safe: string) => void): void {
  if (s['objtype'] !== 'OBJECT_TABLE') return;
  const table = relName(s['relation']);
  const isExisting = known.tables.has(table) && !st.createdTables.has(table);
  const noTx = noTxOf(st);
  for (const c of list(s['cmds'])) {
    const cmd = nodeOf(c)?.[1];
    if (!cmd) continue;
    const sub = cmd['subtype'] as string;
    const def = nodeOf(cmd['def']);
    const column = cmd['name'] as string | undefined;
    if (sub !== 'AT_ValidateConstraint') st.alteredTables.add(table);
    switch (sub) {
      case 'AT_AddColumn': {
        const col = def?.[1] ?? {};
        const colName = col['colname'] as string;
        if (noTx && !cmd['missing_ok']) notIdempotent('ADD COLUMN without IF NOT EXISTS', 'ALTER TABLE ... ADD COLUMN IF NOT EXISTS ...');
        if (!isExisting) break;
        const typeNames = list((col['typeName'] as Obj | undefined)?.['names']).map(str);
        const typeName = typeNames.at(-1) ?? '';
        if (/^(small|big)?serial[248]?$/.test(typeName)) {
          flag(
            'volatile-default',
            `ADD COLUMN ${colName} ${typeName}: a serial column's default is nextval(), volatile, so PostgreSQL rewrites ${table} under an ACCESS EXCLUSIVE lock to give each row its value`,
            `ADD COLUMN ${colName} bigint (no default), then ALTER COLUMN ${colName} SET DEFAULT nextval(...) (applies to new rows only), and fill old rows in batches outside the migration if they need one`,
          );
        }
        const hasDefault = list(col['constraints']).some((x) => nodeOf(x)?.[1]['contype'] === 'CONSTR_DEFAULT');
        for (const cc of list(col['constraints'])) {
          const con = nodeOf(cc)?.[1];
          if (!con) continue;
          const contype = con['contype'] as string;
          if (contype === 'CONSTR_DEFAULT') {
            const fns = calledFunctions(con['raw_expr']);
            const volatile = fns.filter((fn) => VOLATILE_FUNCTIONS.has(fn));
            const unknown = fns.filter((fn) => !VOLATILE_FUNCTIONS.has(fn) && !STABLE_FUNCTIONS.has(fn));
            if (volatile.length > 0 || unknown.length > 0) {
              flag(
                'volatile-default',
                volatile.length > 0
                  ? `ADD COLUMN ${colName} DEFAULT ${volatile.join(', ')}(): a volatile default makes PostgreSQL rewrite ${table} under an ACCESS EXCLUSIVE lock (each row gets its own value)`
                  : `ADD COLUMN ${colName} DEFAULT calls ${unknown.join(', ')}(), whose volatility the checker does not know; a volatile default rewrites ${table} under an ACCESS EXCLUSIVE lock`,
                `ADD COLUMN ${colName} ... without a default (or with a constant, or now()), then ALTER COLUMN ${colName} SET DEFAULT ... (new rows only, no rewrite); fill old rows in batches outside the migration if they need a value`,
              );
            }
          } else if (contype === 'CONSTR_IDENTITY' || contype === 'CONSTR_GENERATED') {
            flag(
              'volatile-default',
              `ADD COLUMN ${colName} ${contype === 'CONSTR_IDENTITY' ? 'GENERATED AS IDENTITY' : 'GENERATED ALWAYS AS (...) STORED'}: PostgreSQL computes it for every existing row, rewriting ${table} under an ACCESS EXCLUSIVE lock`,
              `ADD COLUMN ${colName} without it; let the code (or a trigger) write it for new rows and backfill old ones in batches outside the migration`,
            );
          } else if (contype === 'CONSTR_CHECK' || contype === 'CONSTR_FOREIGN') {
            flag(
              'constraint-not-valid',
              `ADD COLUMN ${colName} with an inline ${contype === 'CONSTR_CHECK' ? 'CHECK' : 'REFERENCES'}: PostgreSQL validates it over every row of ${table} while holding its ALTER TABLE lock`,
              `ADD COLUMN ${colName} plain, then ADD CONSTRAINT name ${contype === 'CONSTR_CHECK' ? 'CHECK (...)' : 'FOREIGN KEY (...) REFERENCES ...'} NOT VALID, and VALIDATE CONSTRAINT name in a later migration`,
            );
          } else if (contype === 'CONSTR_UNIQUE' || contype === 'CONSTR_PRIMARY') {
            flag(
              'unique-using-index',
              `ADD COLUMN ${colName} ${contype === 'CONSTR_UNIQUE' ? 'UNIQUE' : 'PRIMARY KEY'}: builds its index under the ALTER TABLE's ACCESS EXCLUSIVE lock`,
              `ADD COLUMN ${colName} plain; CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS name ON ${table} (${colName}) in a \`-- tc:no-transaction\` migration; then ADD CONSTRAINT name UNIQUE USING INDEX name`,
            );
          } else if (contype === 'CONSTR_NOTNULL') {
            if (!hasDefault) {
              flag(
                'set-not-null',
                `ADD COLUMN ${colName} NOT NULL without a default: fails on a table with rows, and checks every row under an ACCESS EXCLUSIVE lock`,
                `ADD COLUMN ${colName} ... NOT NULL DEFAULT <constant> (PostgreSQL 11+ stores the constant in the catalog, no rewrite), or add it nullable`,
              );
            }
          }
        }
        break;
      }
      case 'AT_AddConstraint': {
        const con = def?.[1] ?? {};
        const contype = con['contype'] as string;
        const name = (con['conname'] as string | undefined) ?? '(unnamed)';
        if (noTx)
          notIdempotent(
            'ADD CONSTRAINT (there is no IF NOT EXISTS for it)',
            'put ADD CONSTRAINT ... NOT VALID in a transactional migration (a failed run rolls back whole)',
          );
        recordCheck(con, table, known, st);
        if (!isExisting) break;
        if ((contype === 'CONSTR_CHECK' || contype === 'CONSTR_FOREIGN') && !con['skip_validation']) {
          flag(
            'constraint-not-valid',
            `ADD CONSTRAINT ${name} ${contype === 'CONSTR_CHECK' ? 'CHECK' : 'FOREIGN KEY'} without NOT VALID reads every row of ${table} to validate it while holding the ALTER TABLE's lock (ACCESS EXCLUSIVE for a CHECK, SHARE ROW EXCLUSIVE on both tables for a FOREIGN KEY): writes wait for the whole scan`,
            `ADD CONSTRAINT ${name} ... NOT VALID (new rows are checked at once), then in a later migration ALTER TABLE ${table} VALIDATE CONSTRAINT ${name} (a SHARE UPDATE EXCLUSIVE lock: writes go on)`,
          );
        }
        if ((contype === 'CONSTR_UNIQUE' || contype === 'CONSTR_PRIMARY') && !con['indexname']) {
          flag(
            'unique-using-index',
            `ADD CONSTRAINT ${name} ${contype === 'CONSTR_UNIQUE' ? 'UNIQUE' : 'PRIMARY KEY'} builds its index under an ACCESS EXCLUSIVE lock on ${table}: no reads or writes until it is built`,
            `CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ${name} ON ${table} (...) in a \`-- tc:no-transaction\` migration, then ALTER TABLE ${table} ADD CONSTRAINT ${name} ${contype === 'CONSTR_UNIQUE' ? 'UNIQUE' : 'PRIMARY KEY'} USING INDEX ${name}`,
          );
        }
        if (contype === 'CONSTR_EXCLUSION') {
          flag(
            'unique-using-index',
            `ADD CONSTRAINT ${name} EXCLUDE builds its index under an ACCESS EXCLUSIVE lock on ${table}, and an exclusion constraint cannot be attached from an index built CONCURRENTLY`,
            'enforce it another way (a unique index built CONCURRENTLY, a trigger), or on a new table',
          );
        }
        break;
      }
      case 'AT_ValidateConstraint': {
        const name = column ?? '';
        const key = `${table}:${name}`;
        const c = known.checks.get(key);
        const otherAlters = [...st.alteredTables].filter((t) => known.tables.has(t));
        if (st.addedConstraints.has(key) || (otherAlters.length > 0 && !noTx)) {
          flag(
            'validate-separately',
            st.addedConstraints.has(key)
              ? `VALIDATE CONSTRAINT ${name} in the migration that adds it: the ADD's lock is held until this transaction commits, so the validating scan runs under it and writes wait for it (NOT VALID bought nothing)`
              : `VALIDATE CONSTRAINT ${name} after an ALTER TABLE of ${otherAlters.join(', ')} in the same transaction: that ALTER's lock is held until COMMIT, so the validating scan of ${table} runs under it and writers of ${otherAlters.join(', ')} wait for it`,
            `ALTER TABLE ${table} VALIDATE CONSTRAINT ${name} alone in a later migration (its SHARE UPDATE EXCLUSIVE lock lets writes go on)`,
          );
        }
        if (c) c.valid = true;
        break;
      }
      case 'AT_AlterColumnType':
        if (isExisting)
          flag(
            'column-type',
            `ALTER COLUMN ${column} TYPE on ${table}: PostgreSQL rewrites the table and rebuilds its indexes under an ACCESS EXCLUSIVE lock (minutes at 100M rows), and the previous release reads the old type`,
            `add a new column of the new type, have the code write both, backfill in batches outside the migration, switch readers, and drop the old column a release later (-- tc:unread-since)`,
          );
        break;
      case 'AT_SetNotNull': {
        if (!isExisting) break;
        const proven = [...known.checks.values()].some((c) => c.table === table && c.notNull === column && c.valid);
        if (!proven) {
          flag(
            'set-not-null',
            `SET NOT NULL on ${table}.${column} reads every row to prove it under an ACCESS EXCLUSIVE lock: no reads or writes for the whole scan`,
            `ADD CONSTRAINT ${column}_not_null CHECK (${column} IS NOT NULL) NOT VALID; VALIDATE CONSTRAINT ${column}_not_null in a later migration; then SET NOT NULL (PostgreSQL 12+ uses the validated check and skips the scan) and drop the check`,
          );
        }
        break;
      }
      case 'AT_DropColumn':
        if (noTx && !cmd['missing_ok']) notIdempotent('DROP COLUMN without IF EXISTS', 'ALTER TABLE ... DROP COLUMN IF EXISTS ...');
        if (isExisting && isCenter(table)) contract(`${table}.${column}`, 'drops', st, known, flag);
        break;
      case 'AT_SetTableSpace':
      case 'AT_SetLogged':
      case 'AT_SetUnLogged':
        if (isExisting) {
          const what = sub === 'AT_SetTableSpace' ? 'SET TABLESPACE' : sub === 'AT_SetLogged' ? 'SET LOGGED' : 'SET UNLOGGED';
          flag(
            'table-rewrite',
            `${what} rewrites ${table} under an ACCESS EXCLUSIVE lock: no reads or writes until the copy is done`,
            'not in a migration: an operator does it in a maintenance window, or online with pg_repack (docs/operations.md)',
          );
        }
        break;
      default:
        break;
    }
  }
}

function checkWrite(type: string, s: Obj, st: FileState, known: Knowledge, flag: Flag, noTx: boolean, notIdempotent: (w: string, safe: string) => void): void {
  const table = relName(s['relation']);
  const verb = type === 'UpdateStmt' ? 'UPDATE' : type === 'DeleteStmt' ? 'DELETE' : 'INSERT';
  if (type === 'InsertStmt') {
    const onConflict = s['onConflictClause'] as Obj | undefined;
    if (noTx && !onConflict) notIdempotent('INSERT without ON CONFLICT', 'INSERT ... ON CONFLICT DO NOTHING');
  }
  // Writes inside its WITH clause (a DELETE ... RETURNING moving rows, say).
  for (const cte of list((s['withClause'] as Obj | undefined)?.['ctes'])) {
    const q = nodeOf((nodeOf(cte)?.[1] ?? {})['ctequery']);
    if (q && ['UpdateStmt', 'DeleteStmt', 'InsertStmt'].includes(q[0])) checkWrite(q[0], q[1], st, known, flag, noTx, notIdempotent);
  }
  const growing = isGrowing(table, st, known);
  const fromSelect = type !== 'InsertStmt' || s['selectStmt'] !== undefined;
  const valuesOnly = type === 'InsertStmt' && (((s['selectStmt'] as Obj | undefined)?.['SelectStmt'] as Obj | undefined)?.['valuesLists'] ?? null) !== null;
  if (type === 'InsertStmt' && !valuesOnly) checkReadUnderLock(s['selectStmt'], 'INSERT ... SELECT', st, known, flag);
  if (growing && fromSelect && !valuesOnly) {
    flag(
      'unbatched-write',
      `${verb} of ${table}, a table that grows with traffic, in one statement: it locks every row it writes until the migration commits (claims skip them, cancels and reschedules wait) and writes a new version of each, all in one transaction (minutes at 100M rows; any ALTER TABLE before it in the file holds its lock for as long)`,
      'keep the migration to the schema change; let the code fill the new column as it writes rows and read NULL as "not known yet", or backfill in batches of a few thousand rows by id range, each its own transaction, outside the migration',
    );
  }
}

function isGrowing(table: string, st: FileState, known: Knowledge): boolean {
  return known.tables.has(table) && !st.createdTables.has(table) && isCenter(table) && !SMALL_TABLES.has(tableOnly(table));
}

/** Every table a query reads (its RangeVars). */
function readTables(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) {
    for (const n of node) readTables(n, out);
    return out;
  }
  if (!node || typeof node !== 'object') return out;
  for (const [k, v] of Object.entries(node as Obj)) {
    if (k === 'RangeVar') out.push(relName(v));
    readTables(v, out);
  }
  return out;
}

/** A copy of a growing table in a transaction that already holds an ALTER TABLE's lock: the
 *  lock (ACCESS EXCLUSIVE for most ALTERs) is held until COMMIT, so the copy runs under it. */
function checkReadUnderLock(query: unknown, verb: string, st: FileState, known: Knowledge, flag: Flag): void {
  if (st.directives.noTransaction) return;
  const locked = [...st.alteredTables].filter((t) => known.tables.has(t) && !st.createdTables.has(t));
  if (locked.length === 0) return;
  const big = [...new Set(readTables(query))].filter((t) => isGrowing(t, st, known));
  if (big.length === 0) return;
  flag(
    'work-under-lock',
    `${verb} reads all of ${big.join(', ')} after an ALTER TABLE of ${locked.join(', ')} in the same transaction: that ALTER's lock is held until COMMIT, so ${locked.join(', ')} stays locked for the whole read (the pattern of sql/0017, which blocked inserts into timeouts for the whole copy)`,
    'keep the ALTER TABLE in a migration of its own (a catalog change, milliseconds), and copy data in batches outside the migration',
  );
}
