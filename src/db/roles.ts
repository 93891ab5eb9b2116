// The group roles of least privilege (docs/roles.md): `migrate` creates them (NOLOGIN, once, marked
// as ours with a COMMENT ON ROLE) and grants them what each kind of user needs, in the center, in
// every store (the same schema) and in every business database (the marker table), every time it
// runs: tables added by later migrations are covered, and drift is repaired. A DBA grants them to
// login roles; nothing but `migrate` needs the schema's owner.
//
// Where a name is taken by a role that is not ours, or the migrating role may not create roles,
// nothing is granted to that role and the report says what a DBA runs instead; the schema is
// migrated all the same (roles are a deployment's choice, not a condition of running).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { MIGRATION_LOCK_KEY } from './migrate.js';

export const ROLES = {
  writer: 'timeout_center_writer',
  reader: 'timeout_center_reader',
  operator: 'timeout_center_operator',
  engine: 'timeout_center_engine',
} as const;
export type RoleKind = keyof typeof ROLES;
const ALL_ROLES: readonly string[] = Object.values(ROLES);

/** The comment that marks a role as the center's (a role of the same name without it is not ours). */
export const ROLE_MARK = 'timeout-center group role, kept by timeout-center migrate (docs/roles.md)';

const ROLES_SQL = (file: string) => readFileSync(fileURLToPath(new URL(`../../sql/roles/${file}`, import.meta.url)), 'utf8');

/** Functions any of the four roles may call: pure helpers that views, policies and the triggers a
 *  writer fires call (function privileges are the caller's, in a view too). */
const HELPERS = ['route_target', 'target_of', 'store_of', 'routes_to', 'kind_or_null', 'current_actor', 'writer_may', 'writable_kinds', 'bucket_of'];
/** The history's retention (sql/0050): run by the engine's coordinator and by an operator's
 *  `purge`; with the owner's rights (partitions are the table owner's to create and drop). */
const HISTORY_RETENTION = ['rotate_history', 'purge_history'];
const RETAINERS: RoleKind[] = ['engine', 'operator'];
/** Who may call settle (sql/0021, 0040): it runs with its owner's rights. */
const SETTLERS: RoleKind[] = ['writer', 'operator', 'engine'];

export type DatabaseRole = 'center' | 'store' | 'business database';

export interface RolesProblem {
  role: string;
  problem: string;
  /** What a DBA runs to fix it (then `migrate` again grants the rest). */
  sql: string;
}

export interface RolesOutcome {
  /** Roles this run created (cluster-wide: a role is created once per PostgreSQL server). */
  created: string[];
  /** Roles that are ours and were granted their privileges in this database. */
  granted: string[];
  /** Row-level security of timeouts is on in this database (writers limited to kinds: writer_kinds has rows). */
  rowSecurity: boolean;
  problems: RolesProblem[];
}

interface RoleRow {
  rolname: string;
  mark: string | null;
}

const createSql = (role: string) => `CREATE ROLE ${role} NOLOGIN; COMMENT ON ROLE ${role} IS '${ROLE_MARK}';`;

/** Creates what is missing of the four roles, and says which are ours. */
async function ensureRoles(client: pg.PoolClient | pg.Client, out: RolesOutcome): Promise<Set<string>> {
  const read = async () =>
    (
      await client.query<RoleRow>(
        `SELECT r.rolname::text AS rolname, pg_catalog.shobj_description(r.oid, 'pg_authid') AS mark
           FROM pg_catalog.pg_roles r WHERE r.rolname = ANY ($1::text[])`,
        [ALL_ROLES],
      )
    ).rows;
  const { rows: me } = await client.query<{ may: boolean; who: string }>(
    `SELECT (r.rolsuper OR r.rolcreaterole) AS may, r.rolname::text AS who FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`,
  );
  const mayCreate = me[0]?.may ?? false;
  let existing = await read();
  for (const role of ALL_ROLES) {
    if (existing.some((r) => r.rolname === role)) continue;
    if (!mayCreate) {
      out.problems.push({
        role,
        problem: `role ${role} does not exist and ${me[0]?.who ?? 'the migrating role'} may not create roles (no CREATEROLE)`,
        sql: createSql(role),
      });
      continue;
    }
    // CREATE and COMMENT commit together: a migrate of another database racing this one waits on
    // the name and then sees a marked role.
    try {
      await client.query('BEGIN');
      await client.query(createSql(role));
      await client.query('COMMIT');
      out.created.push(role);
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      const code = (err as { code?: string }).code;
      if (code !== '42710' && code !== '23505') throw err; // another migrate created it first
    }
  }
  existing = await read();
  const ours = new Set<string>();
  for (const r of existing) {
    if (r.mark === ROLE_MARK) ours.add(r.rolname);
    else
      out.problems.push({
        role: r.rolname,
        problem: `role ${r.rolname} exists and is not the center's (it has no timeout-center comment): nothing is granted to it`,
        sql: `-- if ${r.rolname} is meant to be the center's role (NOLOGIN, granted to the login roles of that kind of user):\nCOMMENT ON ROLE ${r.rolname} IS '${ROLE_MARK}';\n-- otherwise rename the other role (ALTER ROLE ${r.rolname} RENAME TO ...)`,
      });
  }
  return ours;
}

async function exists(client: pg.PoolClient | pg.Client, what: string): Promise<boolean> {
  const { rows } = await client.query<{ ok: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS ok`, [what]);
  return rows[0]?.ok ?? false;
}

async function grantFunctions(client: pg.PoolClient | pg.Client, ours: Set<string>): Promise<void> {
  const { rows } = await client.query<{ fn: string; name: string }>(
    `SELECT p.oid::regprocedure::text AS fn, p.proname::text AS name
       FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = 'timeout_center' AND p.proname = ANY ($1::text[]) AND p.prokind = 'f'`,
    [[...HELPERS, 'settle', ...HISTORY_RETENTION]],
  );
  for (const { fn, name } of rows) {
    const to = (name === 'settle' ? SETTLERS.map((k) => ROLES[k]) : HISTORY_RETENTION.includes(name) ? RETAINERS.map((k) => ROLES[k]) : ALL_ROLES).filter((r) =>
      ours.has(r),
    );
    if (to.length > 0) await client.query(`GRANT EXECUTE ON FUNCTION ${fn} TO ${to.join(', ')}`);
  }
}

/** Row-level security of timeouts: each missing policy created; switched on while writer_kinds has a
 *  row (an ALTER TABLE takes a short exclusive lock: only when it changes). True when on. */
async function rowSecurity(client: pg.PoolClient | pg.Client, out: RolesOutcome): Promise<boolean> {
  const { rows } = await client.query<{ policyname: string }>(
    `SELECT policyname::text FROM pg_catalog.pg_policies WHERE schemaname = 'timeout_center' AND tablename = 'timeouts'`,
  );
  const have = new Set(rows.map((r) => r.policyname));
  for (const statement of ROLES_SQL('policies.sql')
    .split(/;\s*$/m)
    .map((s) =>
      s
        .split('\n')
        .filter((l) => !/^\s*--/.test(l))
        .join('\n')
        .trim(),
    )
    .filter(Boolean)) {
    const name = /^CREATE POLICY (\w+)/.exec(statement)?.[1];
    if (name && !have.has(name)) await client.query(statement);
  }
  // On while writer_kinds has a row (sql/0040's apply_writer_kinds, also run by its trigger).
  await client.query('SELECT timeout_center.apply_writer_kinds()');
  const { rows: on } = await client.query<{ on: boolean }>(
    `SELECT relrowsecurity AS on FROM pg_catalog.pg_class WHERE oid = 'timeout_center.timeouts'::regclass`,
  );
  if (!on[0]?.on) return false;
  // Every login holding the engine role pays for the policies unless it bypasses them: its claim
  // would lose its index (docs/roles.md). BYPASSRLS is an attribute of the login, and only a
  // superuser gives it.
  const { rows: slow } = await client.query<{ rolname: string }>(
    `SELECT r.rolname::text AS rolname FROM pg_catalog.pg_roles r
      WHERE r.rolcanlogin AND NOT r.rolbypassrls AND NOT r.rolsuper AND pg_catalog.pg_has_role(r.oid, $1, 'MEMBER')
        AND r.oid <> (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = 'timeout_center.timeouts'::regclass)`,
    [ROLES.engine],
  );
  for (const r of slow)
    out.problems.push({
      role: r.rolname,
      problem: `writers are limited to kinds (timeout_center.writer_kinds), so row-level security is on for timeouts, and ${r.rolname} (timeout_center_engine) does not bypass it: its claims cannot use the kind index`,
      sql: `ALTER ROLE ${r.rolname} BYPASSRLS;   -- as a superuser`,
    });
  return true;
}

/**
 * The roles and their grants in one database, as `migrate` leaves it: the center and a store get
 * the schema's grants, a business database those of its marker table. Idempotent; serialized with
 * migrations by the migration lock. Statements run with a short lock_timeout and are retried by
 * the caller's next migrate if a lock is not had.
 */
export async function applyRoles(client: pg.PoolClient | pg.Client, where: DatabaseRole): Promise<RolesOutcome> {
  const out: RolesOutcome = { created: [], granted: [], rowSecurity: false, problems: [] };
  const ours = await ensureRoles(client, out);
  await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY.toString()]);
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL lock_timeout = '2s'`);
    if (where === 'business database') {
      // The marker table only: the engine writes one row per external shard run, a reader reads them.
      if (await exists(client, 'timeout_center.markers')) {
        await client.query('REVOKE ALL ON timeout_center.markers FROM PUBLIC');
        for (const role of [ROLES.engine, ROLES.reader, ROLES.operator].filter((r) => ours.has(r))) {
          await client.query(`GRANT USAGE ON SCHEMA timeout_center TO ${role}`);
          await client.query(`GRANT ${role === ROLES.engine ? 'SELECT, INSERT, UPDATE, DELETE' : 'SELECT'} ON timeout_center.markers TO ${role}`);
          out.granted.push(role);
        }
      }
    } else {
      // On a Citus layout (timeouts distributed over worker nodes, sql/citus/layout.sql) Citus
      // propagates these statements to the nodes; it refuses column privileges there.
      const citus = await exists(client, 'timeout_center.layout');
      await client.query(ROLES_SQL('harden.sql'));
      for (const kind of Object.keys(ROLES) as RoleKind[]) {
        const role = ROLES[kind];
        if (!ours.has(role)) continue;
        await client.query(ROLES_SQL(kind === 'writer' && citus ? 'writer_citus.sql' : `${kind}.sql`));
        out.granted.push(role);
      }
      if (where === 'store' && ours.has(ROLES.engine) && ours.has(ROLES.operator)) {
        // A store's audit_log is an outbox (sql/0015): its rows are deleted once copied to the center's.
        await client.query(`GRANT DELETE ON timeout_center.audit_log TO ${ROLES.engine}, ${ROLES.operator}`);
      }
      await grantFunctions(client, ours);
      // Row-level security names all four roles: with one of them missing or not ours, a login
      // holding it would see no timeout at all. It waits for the four. Not on a Citus layout: Citus
      // runs the policies on the worker nodes, where writer_kinds (a table of the coordinator) is
      // not; writers are not limited to kinds there yet (docs/roles.md, "On Citus").
      if (!citus && ALL_ROLES.every((r) => ours.has(r))) {
        out.rowSecurity = await rowSecurity(client, out);
      }
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw new Error(`roles and grants (docs/roles.md) failed and were rolled back: ${(err as Error).message}`, { cause: err });
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY.toString()]).catch(() => {});
  }
  return out;
}

/** What to tell the operator about one database's roles: nothing when all is well. */
export function describeRolesProblems(database: string, outcome: RolesOutcome): string[] {
  if (outcome.problems.length === 0) return [];
  const lines = [`${database}: the least-privilege roles are not complete (the schema is migrated; processes connecting as its owner run as before):`];
  for (const p of outcome.problems) lines.push(`  - ${p.problem}`);
  lines.push('  A DBA (a role with CREATEROLE) runs, once per PostgreSQL server:');
  for (const p of outcome.problems) lines.push(...p.sql.split('\n').map((l) => `    ${l}`));
  lines.push('  then `timeout-center migrate` again grants them their privileges (docs/roles.md).');
  return lines;
}
