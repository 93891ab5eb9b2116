// The schema contract: the database records its schema version (the newest migration applied)
// and the oldest code version that may run on it (timeout_center.schema_contract, written by
// `migrate`). Every process checks it at start and while it runs (process-registry.ts):
//   - schema older than this build needs: refuse to start, naming `migrate`;
//   - newer, and this version not below the oldest code: run (a rollback of the code works);
//   - newer and this version below the oldest code: refuse, saying what to run instead.
// Temporal's rule (refuse an older schema, allow a newer one) with graphile-worker's refusal of a
// breaking migration it does not know. docs/upgrading.md "Which code runs on which schema".
import semver from 'semver';
import { listMigrations, MIGRATIONS_DIR, PRE_RELEASE_CODE } from '../db/migrations.js';
import { VERSION } from '../version.js';

/** Anything that runs a query: a pg pool or client. */
export interface Db {
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

export interface SchemaContract {
  /** The newest migration applied. */
  schemaVersion: number;
  /** The oldest timeout-center version that may run on it. */
  oldestCode: string;
  /** The version of the `migrate` that wrote it; null when migrated by the code before 1.0.0. */
  migratedBy: string | null;
}

export interface Build {
  version: string;
  /** The newest migration this build ships: it needs the schema to have it. */
  schemaVersion: number;
}

export function thisBuild(dir = MIGRATIONS_DIR): Build {
  return { version: VERSION, schemaVersion: listMigrations(dir).at(-1)?.version ?? 0 };
}

/** The contract of the database behind db; null when it has no timeout_center schema. */
export async function readSchemaContract(db: Db): Promise<SchemaContract | null> {
  // Separate statements: a query naming a missing table fails at parse time.
  const { rows: t } = await db.query<{ migrations: string | null; contract: string | null }>(
    "SELECT to_regclass('timeout_center.migrations')::text AS migrations, to_regclass('timeout_center.schema_contract')::text AS contract",
  );
  if (!t[0]?.migrations) return null;
  const { rows: m } = await db.query<{ v: number }>('SELECT coalesce(max(version), 0)::int AS v FROM timeout_center.migrations');
  const schemaVersion = m[0]?.v ?? 0;
  if (!t[0].contract) return { schemaVersion, oldestCode: PRE_RELEASE_CODE, migratedBy: null };
  const { rows: c } = await db.query<{ oldest_code: string; migrated_by: string }>('SELECT oldest_code, migrated_by FROM timeout_center.schema_contract');
  return { schemaVersion, oldestCode: c[0]?.oldest_code ?? PRE_RELEASE_CODE, migratedBy: c[0]?.migrated_by ?? null };
}

export type Verdict = { ok: true; state: 'current' | 'newer'; message: string } | { ok: false; state: 'missing' | 'older' | 'incompatible'; message: string };

const pad = (v: number): string => String(v).padStart(4, '0');

/** What this build may do on that schema, with the sentence for the operator. */
export function judgeSchema(contract: SchemaContract | null, build: Build, database = 'the database'): Verdict {
  if (contract === null) {
    return {
      ok: false,
      state: 'missing',
      message: `${database} schema is missing (no timeout_center schema): run \`timeout-center migrate\` first, with timeout-center ${build.version}`,
    };
  }
  const by = contract.migratedBy ? `, migrated by timeout-center ${contract.migratedBy}` : '';
  if (contract.schemaVersion < build.schemaVersion) {
    return {
      ok: false,
      state: 'older',
      message:
        `${database} schema is at migration ${pad(contract.schemaVersion)}${by}; timeout-center ${build.version} needs ${pad(build.schemaVersion)}. ` +
        'Run `timeout-center migrate` with this version first (it is online: the processes already running keep running), then start this process again',
    };
  }
  if (semver.lt(build.version, contract.oldestCode)) {
    return {
      ok: false,
      state: 'incompatible',
      message:
        `${database} schema is at migration ${pad(contract.schemaVersion)}${by}, which needs timeout-center ${contract.oldestCode} or newer; this is ${build.version}. ` +
        `Run timeout-center ${contract.oldestCode} or newer: this version cannot run on that schema (docs/upgrading.md, "Rolling back")`,
    };
  }
  if (contract.schemaVersion > build.schemaVersion) {
    return {
      ok: true,
      state: 'newer',
      message:
        `${database} schema is at migration ${pad(contract.schemaVersion)}${by}, newer than this build's ${pad(build.schemaVersion)}; ` +
        `it still runs timeout-center ${contract.oldestCode} and later, so ${build.version} runs on it`,
    };
  }
  return { ok: true, state: 'current', message: `${database} schema is at migration ${pad(contract.schemaVersion)}, as timeout-center ${build.version} needs` };
}

/** A process that must not run on the schema it met. */
export class SchemaContractError extends Error {
  constructor(
    message: string,
    readonly state: 'missing' | 'older' | 'incompatible',
  ) {
    super(message);
    this.name = 'SchemaContractError';
  }
}

/** Reads and judges; throws SchemaContractError when this build may not run there. */
export async function checkSchemaContract(db: Db, options: { build?: Build; database?: string } = {}): Promise<Verdict & { ok: true }> {
  const verdict = judgeSchema(await readSchemaContract(db), options.build ?? thisBuild(), options.database);
  if (!verdict.ok) throw new SchemaContractError(verdict.message, verdict.state);
  return verdict;
}
