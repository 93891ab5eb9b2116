// Least privilege (issue 46, docs/roles.md): logins that each hold one of the four group roles
// `migrate` keeps (writer, reader, operator, engine) do their job, and nothing more.
//   - the writer runs README section 3's SQL as written (the roles block first, with its own role
//     name), the payment race as written against a fleet, settle; it is refused everything else;
//   - the engine runs a coordinator and workers under a burst with payers (the four invariants), and
//     `run --api --console` (a burst drains, the API schedules, the console's pause is audited);
//   - the generator (`timeout-center generate`) runs as a writer; section 3 runs as a writer in a
//     store, where the insert check reads what a writer may not;
//   - migrate on a server without the roles, as a login without CREATEROLE, with a name taken:
//     the schema migrated, the SQL for a DBA printed, the grants once it ran;
//   - the reader reads the views and writes nothing; the operator's CLI verbs work and are audited
//     under its login (audit_log.db_user);
//   - a writer limited to some kinds (writer_kinds) neither sees nor touches another kind;
//   - the SECURITY DEFINER functions a writer reaches cannot be turned against the center: a
//     search_path of the writer's own schema with shadowing functions, operators and tables, a
//     temporary orders table, and payloads that try SQL injection.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, ROLE_MARK } from '../../src/db/roles.js';
import { killAll, runCli, spawnCli } from '../helpers/processes.js';
import { ADMIN_DATABASE_URL, createTestDatabase, TEST_REDIS_URL, testKeyPrefix, uniqueName } from '../helpers/services.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { freePort, startPostgres, type PostgresServer } from '../helpers/servers.js';
import { KIND, report, Scenario } from '../faults/harness.js';
import { paymentRace } from '../docs/payment-race.js';
import { forOrder, namedBlock, statements } from '../docs/readme-blocks.js';

const OTHER_KIND = 'order.unshipped';
let s: Scenario;
const logins: string[] = [];
const admin = new pg.Pool({ connectionString: ADMIN_DATABASE_URL, max: 1 });

function urlAs(role: string): string {
  const u = new URL(s.databaseUrl);
  u.username = role;
  u.password = '';
  return u.toString();
}

/** A login holding the given group roles only; its name is unique to this run (roles are cluster-wide). */
async function login(label: string, ...groups: string[]): Promise<{ name: string; url: string; pool: pg.Pool }> {
  const name = uniqueName(`tc_${label}`)
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '_');
  await admin.query(`CREATE ROLE ${name} LOGIN`);
  logins.push(name);
  for (const g of groups) await admin.query(`GRANT ${g} TO ${name}`);
  const pool = new pg.Pool({ connectionString: urlAs(name), max: 4 });
  pool.on('error', () => {});
  pools.push(pool);
  return { name, url: urlAs(name), pool };
}
const pools: pg.Pool[] = [];

/** A business service's own tables, as the README's roles block grants them (the test schema's
 *  orders trigger also writes order_transitions). */
async function grantOrders(role: string): Promise<void> {
  await s.pool.query(`GRANT SELECT, INSERT, UPDATE ON orders TO ${role}; GRANT INSERT ON order_transitions TO ${role}`);
}

async function run(pool: pg.Pool | pg.PoolClient, text: string): Promise<pg.QueryResult[]> {
  const r = (await pool.query(text)) as unknown as pg.QueryResult | pg.QueryResult[];
  return Array.isArray(r) ? r : [r];
}

const refused = async (pool: pg.Pool, sql: string) => {
  await expect(pool.query(sql), sql).rejects.toMatchObject({ code: '42501' }); // insufficient_privilege
};

beforeAll(async () => {
  s = await Scenario.create('roles', { extraKinds: [OTHER_KIND], kind: { shardSize: 50 }, worker: { concurrency: 3 } });
});

afterAll(async () => {
  await killAll();
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
  if (s) {
    for (const name of logins) await s.pool.query(`DROP OWNED BY ${name} CASCADE`).catch(() => {});
    await s.close();
  }
  for (const name of logins) await admin.query(`DROP ROLE IF EXISTS ${name}`).catch(() => {});
  await admin.end();
});

describe('the group roles migrate keeps', () => {
  it('exist, NOLOGIN, marked as ours; migrate again changes nothing and says nothing', async () => {
    const { rows } = await s.pool.query<{ rolname: string; rolcanlogin: boolean; mark: string }>(
      `SELECT rolname::text, rolcanlogin, shobj_description(oid, 'pg_authid') AS mark FROM pg_roles WHERE rolname = ANY ($1) ORDER BY 1`,
      [Object.values(ROLES)],
    );
    expect(rows.map((r) => r.rolname)).toEqual(Object.values(ROLES).sort());
    for (const r of rows) expect(r).toMatchObject({ rolcanlogin: false, mark: ROLE_MARK });
    const again = await runCli(['migrate', '--config', s.configPath, '--no-logs'], s.env());
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toBe('');
    // Row-level security is off while no writer is limited to kinds (the engine's claims keep their
    // plans), its policies ready; no function of the schema is PUBLIC's.
    expect((await s.pool.query(`SELECT relrowsecurity FROM pg_class WHERE oid = 'timeout_center.timeouts'::regclass`)).rows[0].relrowsecurity).toBe(false);
    expect(await s.count(`SELECT count(*) AS n FROM pg_policies WHERE schemaname = 'timeout_center' AND tablename = 'timeouts'`)).toBe(5);
    const publicFns = await s.count(
      `SELECT count(*) AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'timeout_center' AND has_function_privilege('public', p.oid, 'EXECUTE')`,
    );
    expect(publicFns).toBe(0);
  });

  it('a schema owned by a login that may not create roles is granted to the roles the server has', async () => {
    const owner = (await login('owner')).name;
    const db = uniqueName('tc_roles_owner').toLowerCase();
    await admin.query(`CREATE DATABASE ${db} OWNER ${owner}`);
    try {
      const u = new URL(s.databaseUrl);
      u.username = owner;
      u.pathname = `/${db}`;
      const r = await runCli(['migrate', '--schema-only', '--no-logs'], { ...s.env(), DATABASE_URL: u.toString() });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toBe('');
      const c = new pg.Client({ connectionString: u.toString() });
      await c.connect();
      try {
        const { rows } = await c.query(
          `SELECT has_column_privilege('${ROLES.writer}', 'timeout_center.timeouts', 'kind', 'INSERT') AS writer,
                  has_table_privilege('${ROLES.engine}', 'timeout_center.shards', 'UPDATE') AS engine,
                  has_table_privilege('${ROLES.writer}', 'timeout_center.shards', 'SELECT') AS writer_shards`,
        );
        expect(rows[0]).toEqual({ writer: true, engine: true, writer_shards: false });
      } finally {
        await c.end();
      }
    } finally {
      await admin.query(`DROP DATABASE ${db} WITH (FORCE)`);
    }
  });
});

describe('on a server without the roles, migrating as a login that may not create roles', () => {
  let server: PostgresServer;
  afterAll(async () => {
    await server?.stop();
  });

  it('migrates the schema, says which roles are missing or taken and the SQL a DBA runs; after it, grants them', async () => {
    server = await startPostgres();
    const su = new pg.Client({ connectionString: server.url('postgres') });
    await su.connect();
    try {
      // app owns the database, without CREATEROLE; a role of one of our names exists, not ours.
      for (const statement of ['CREATE ROLE app LOGIN', 'CREATE DATABASE shop OWNER app', `CREATE ROLE ${ROLES.reader} NOLOGIN`]) await su.query(statement);
      const url = new URL(server.url('shop'));
      url.username = 'app';
      const migrate = () => runCli(['migrate', '--schema-only', '--no-logs'], { DATABASE_URL: url.toString() });
      const first = await migrate();
      expect(first.code, first.stderr).toBe(0);
      for (const role of [ROLES.writer, ROLES.operator, ROLES.engine])
        expect(first.stderr).toContain(`role ${role} does not exist and app may not create roles`);
      expect(first.stderr).toContain(`role ${ROLES.reader} exists and is not the center's`);
      console.log(`migrate without CREATEROLE, stderr:\n${first.stderr}`);
      // The DBA runs the CREATE ROLE lines as printed.
      const printed = first.stderr
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l.startsWith('CREATE ROLE'));
      expect(printed).toHaveLength(3);
      for (const line of printed) await su.query(line);
      const second = await migrate();
      expect(second.code).toBe(0);
      expect(second.stderr).not.toContain('does not exist');
      expect(second.stderr).toContain(`role ${ROLES.reader} exists and is not the center's`);
      const shop = new pg.Client({ connectionString: server.url('shop') });
      await shop.connect();
      try {
        const q = async () =>
          (
            await shop.query(
              `SELECT has_table_privilege('${ROLES.engine}', 'timeout_center.shards', 'UPDATE') AS engine,
                      has_table_privilege('${ROLES.reader}', 'timeout_center.shards', 'SELECT') AS reader,
                      (SELECT relrowsecurity FROM pg_class WHERE oid = 'timeout_center.timeouts'::regclass) AS rls`,
            )
          ).rows[0];
        // Nothing is granted to a role that is not ours.
        expect(await q()).toEqual({ engine: true, reader: false, rls: false });
        // The DBA adopts it, as the message says.
        const adopt = second.stderr
          .split('\n')
          .map((l) => l.trim())
          .find((l) => l.startsWith('COMMENT ON ROLE'));
        await su.query(adopt!);
        const third = await migrate();
        expect(third.stderr).toBe('');
        expect(await q()).toEqual({ engine: true, reader: true, rls: false });
      } finally {
        await shop.end();
      }
    } finally {
      await su.end();
    }
  }, 120_000);
});

describe('writer: a business service', () => {
  it('runs README section 3 as written, from the roles block on, and is refused everything else', async () => {
    const roles = namedBlock('roles').text;
    const name = uniqueName('tc_orders_service').toLowerCase();
    // The roles block as written, with this run's role name (a role is cluster-wide).
    await run(s.pool, roles.replace(/\borders_service\b/g, name));
    logins.push(name);
    await s.pool.query(`GRANT INSERT ON order_transitions TO ${name}`);
    const w = new pg.Pool({ connectionString: urlAs(name), max: 2 }).on('error', () => {});
    pools.push(w);
    const create = namedBlock('create').text;
    const pay = namedBlock('pay').text;
    const reschedule = namedBlock('reschedule').text;
    const id = 900_001;
    await run(w, forOrder(create, id));
    const paid = await run(w, forOrder(pay, id));
    expect(paid[statements(pay).findIndex((st) => /^UPDATE orders\b/.test(st))]!.rowCount).toBe(1);
    expect((await s.pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE biz_id = $1`, [String(id)])).rows).toEqual([{ state: 'cancelled' }]);
    await run(w, forOrder(create, id + 1));
    expect((await run(w, forOrder(reschedule, id + 1)))[0]!.rowCount).toBe(1);
    // The upsert of section 3's rules, and settle (the timeout is not due: not_due).
    await w.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '${id + 1}', now() + interval '2 hours')
       ON CONFLICT (kind, biz_id) WHERE state IN ('pending','dispatched') DO UPDATE SET due_at = EXCLUDED.due_at`,
    );
    expect((await w.query(`SELECT outcome FROM timeout_center.settle('order.unpaid', '${id + 1}')`)).rows).toEqual([{ outcome: 'not_due' }]);
    // A due one settles, applied by the kind's handler with the settle's owner rights.
    await run(w, forOrder(create, id + 2).replace("now() + interval '15 minutes'", 'now()'));
    expect((await w.query(`SELECT outcome, detail FROM timeout_center.settle('order.unpaid', '${id + 2}')`)).rows[0]).toMatchObject({
      outcome: 'applied',
      detail: `settled by ${name}`,
    });
    expect((await s.pool.query(`SELECT status FROM orders WHERE id = $1`, [id + 2])).rows).toEqual([{ status: 'closed' }]);

    // Everything else is refused: shards, scans, leases, kinds, flow controls, the audit log, the
    // history, the engine's columns and functions, deleting.
    for (const sql of [
      'SELECT * FROM timeout_center.shards',
      'SELECT * FROM timeout_center.scans',
      'SELECT * FROM timeout_center.coordinator_lease',
      'UPDATE timeout_center.coordinator_lease SET epoch = epoch + 1',
      'SELECT * FROM timeout_center.workers',
      'SELECT * FROM timeout_center.kinds',
      "UPDATE timeout_center.kinds SET paused = true WHERE kind = 'order.unpaid'",
      'SELECT * FROM timeout_center.kind_controls',
      'UPDATE timeout_center.targets SET rate_limit = 1',
      'SELECT * FROM timeout_center.audit_log',
      "INSERT INTO timeout_center.audit_log (actor, action) VALUES ('x', 'forged')",
      'SELECT * FROM timeout_center.done_timeouts',
      'DELETE FROM timeout_center.done_timeouts',
      'SELECT * FROM timeout_center.all_timeouts',
      'SELECT * FROM timeout_center.backlog',
      'DELETE FROM timeout_center.timeouts',
      'UPDATE timeout_center.timeouts SET attempts = 0',
      'UPDATE timeout_center.timeouts SET shard_id = 1',
      "INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, state) VALUES ('order.unpaid', 'x', now(), 'done')",
      'SELECT * FROM timeout_center.writer_kinds',
      "INSERT INTO timeout_center.writer_kinds VALUES ('someone', 'order.unpaid')",
      'SELECT * FROM timeout_center.store_identity',
      'SELECT * FROM timeout_center.migrations',
      "SELECT * FROM timeout_center.settle_run('order.unpaid', '1', 0, 'me', 1000)",
      'SELECT timeout_center.compile_stamp_target()',
      "SELECT timeout_center.worker_gone('w', 1)",
      'CREATE TABLE timeout_center.mine (x int)',
    ])
      await refused(w, sql);
  });

  it('the payment race as written, payers as the writer, coordinator and workers as the engine: the four invariants', async () => {
    const writer = await login('payer', ROLES.writer);
    await grantOrders(writer.name);
    const engine = await login('engine', ROLES.engine);
    await s.pool.query(`GRANT SELECT, INSERT, UPDATE ON orders TO ${engine.name}; GRANT INSERT ON order_transitions TO ${engine.name}`);
    const env = { DATABASE_URL: engine.url };
    const workers = [s.worker('worker-1', { env }), s.worker('worker-2', { env })];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    const coordinator = s.coordinator('coordinator', { env });
    await coordinator.waitForMsg('became leader', 15_000);
    const appliedBefore = await s.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied'`);
    const figures = await paymentRace(s, workers, namedBlock('pay').text, { n: 2000, spreadMs: 2000, payerUrl: writer.url });
    report('roles: payment race, writer payers and engine fleet', { ...figures });
    expect(figures.payerErrors).toEqual({});
    expect(figures.workerDeadlocks).toBe(0);
    expect(figures.closedThenPaid).toBe(0);
    expect(figures.paidThenClosed).toBe(0);
    const inv = await s.expectInvariants(60_000);
    expect(inv.applied - appliedBefore + figures.paid).toBe(2000);
    // Every process ran as the engine's login.
    const errors = [...workers, coordinator].flatMap((p) => p.lines.filter((l) => /permission denied/i.test(JSON.stringify(l))));
    expect(errors).toEqual([]);
    await s.stopAll();
  }, 180_000);
});

describe('run with the API and the console, as the engine', () => {
  it('drains a burst, schedules over the API, pauses from the console (audited under the engine login)', async () => {
    const engine = await login('engine_run', ROLES.engine);
    await s.pool.query(`GRANT SELECT, UPDATE ON orders TO ${engine.name}; GRANT INSERT ON order_transitions TO ${engine.name}`);
    const [apiPort, consolePort] = [await freePort(), await freePort()];
    const run = spawnCli('run --api --console', ['run', '-c', s.configPath, '--api', String(apiPort), '--console', String(consolePort)], {
      ...s.env(),
      DATABASE_URL: engine.url,
      TC_CONSOLE_USER: 'ops',
      TC_CONSOLE_PASSWORD: 'roles-test-pw',
    });
    try {
      await Promise.all([run.waitForMsg('api listening', 60_000), run.waitForMsg('console listening', 60_000), run.waitForMsg('worker started', 60_000)]);
      const appliedBefore = await s.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE state = 'done' AND result = 'applied'`);
      await s.seed(300, { from: 960_001, dueInMs: 500 });
      const scheduled = await fetch(`http://127.0.0.1:${apiPort}/v1/timeouts`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: KIND, bizId: '969999', delayMs: 3_600_000 }),
      });
      expect(scheduled.status).toBeLessThan(300);
      const inv = await s.expectInvariants(60_000);
      expect(inv.applied - appliedBefore).toBe(300);
      const auth = `Basic ${Buffer.from('ops:roles-test-pw').toString('base64')}`;
      expect((await fetch(`http://127.0.0.1:${consolePort}/kinds`, { headers: { authorization: auth } })).status).toBe(200);
      const paused = await fetch(`http://127.0.0.1:${consolePort}/api/kinds/${KIND}/pause`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(paused.status).toBe(200);
      const { rows } = await s.pool.query(`SELECT action, db_user FROM timeout_center.audit_log ORDER BY id DESC LIMIT 1`);
      expect(rows[0]).toEqual({ action: 'pause', db_user: engine.name });
      await s.pool.query(`UPDATE timeout_center.kinds SET paused = false, controls_source = 'config' WHERE kind = $1`, [KIND]);
      expect(run.lines.filter((l) => /permission denied/i.test(JSON.stringify(l)))).toEqual([]);
      // Retention as the engine (the coordinator's): the history's partitions are the table
      // owner's to create and drop, reached through its SECURITY DEFINER functions (sql/0050).
      const { rows: rotated } = await engine.pool.query(`SELECT * FROM timeout_center.rotate_history(now() - interval '7 days', 3, 100)`);
      expect(rotated.filter((r: { action: string }) => r.action === 'skipped')).toEqual([]);
      await expect(engine.pool.query(`SELECT timeout_center.purge_history(now() - interval '7 days', 100)`)).resolves.toBeDefined();
      const { rows: owners } = await s.pool.query(
        `SELECT DISTINCT pg_get_userbyid(c.relowner) AS owner FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'timeout_center.done_timeouts'::regclass`,
      );
      expect(owners.map((r: { owner: string }) => r.owner)).not.toContain(engine.name);
    } finally {
      await run.stop();
    }
  }, 180_000);
});

describe('the order generator as a writer (docker-compose.yml runs it so)', () => {
  it('`timeout-center generate` schedules and pays with the writer role only', async () => {
    const shop = await login('shop', ROLES.writer);
    await grantOrders(shop.name);
    await s.pool.query(
      `CREATE SEQUENCE IF NOT EXISTS orders_generator_seq START 5000000; GRANT USAGE, SELECT, UPDATE ON SEQUENCE orders_generator_seq TO ${shop.name}`,
    );
    const before = await s.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts`);
    const r = await runCli(['generate', '--rate', '20', '--paid', '50', '--min-delay', '600', '--max-delay', '900', '--duration', '3'], {
      ...s.env(),
      DATABASE_URL: shop.url,
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr + JSON.stringify(r.lines)).not.toMatch(/permission denied/i);
    expect(await s.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts`)).toBeGreaterThan(before);
    expect(await s.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE state = 'cancelled' AND biz_id::bigint >= 5000000`)).toBeGreaterThan(0);
  });
});

describe('reader and operator', () => {
  it('the reader reads the views and reports and writes nothing', async () => {
    const reader = await login('reader', ROLES.reader);
    for (const view of [
      'scan_report',
      'shard_report',
      'failed_timeouts',
      'backlog',
      'all_timeouts',
      'kind_controls',
      'target_controls',
      'live_workers',
      'audit_log',
    ]) {
      await expect(reader.pool.query(`SELECT count(*) FROM timeout_center.${view}`), view).resolves.toBeDefined();
    }
    expect(Number((await reader.pool.query(`SELECT count(*) AS n FROM timeout_center.timeouts`)).rows[0].n)).toBeGreaterThan(0);
    for (const sql of [
      "INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', 'r1', now())",
      "UPDATE timeout_center.timeouts SET state = 'cancelled'",
      "UPDATE timeout_center.kinds SET paused = true WHERE kind = 'order.unpaid'",
      "INSERT INTO timeout_center.audit_log (actor, action) VALUES ('x', 'forged')",
      'DELETE FROM timeout_center.done_timeouts',
      "SELECT * FROM timeout_center.settle('order.unpaid', '1')",
      "SELECT * FROM timeout_center.rotate_history(now() + interval '30 days', 3, 100)",
      'SELECT timeout_center.purge_history(now(), 100)',
    ])
      await refused(reader.pool, sql);
  });

  it("the operator's CLI verbs work and are audited under its login", async () => {
    const operator = await login('operator', ROLES.operator);
    const env = { ...s.env(), DATABASE_URL: operator.url, TIMEOUT_CENTER_CONFIG: s.configPath };
    await s.pool.query(
      `INSERT INTO orders (id, status) VALUES (910001, 'unpaid'), (910002, 'unpaid');
       INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '910001', now() + interval '1 hour'), ('order.unpaid', '910002', now() + interval '1 hour')`,
    );
    // A failed timeout for retry (failed as a worker leaves it, written here by the owner).
    await s.pool.query(
      `INSERT INTO orders (id, status) VALUES (910003, 'unpaid');
       INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '910003', now() + interval '1 hour');
       UPDATE timeout_center.timeouts SET state = 'failed', attempts = 3, finished_at = now(), last_error = 'poison' WHERE kind = 'order.unpaid' AND biz_id = '910003'`,
    );
    const verbs: string[][] = [
      ['retry', '--kind', KIND, '--actor', 'alice'],
      ['purge', '--dry-run'],
      ['purge', '--done-after', '1s', '--scans-after', '1s', '--actor', 'alice'],
      ['pause', KIND, '--actor', 'alice'],
      ['limit', KIND, '--max-running-shards', '4', '--rate', '2000', '--actor', 'alice'],
      ['limit', KIND, '--reset', '--actor', 'alice'],
      ['resume', KIND, '--actor', 'alice'],
      ['cancel', KIND, '910001', '--actor', 'alice'],
      ['status'],
      ['failed'],
      ['scans'],
    ];
    for (const args of verbs) {
      const r = await runCli([...args], env, 90_000);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBeLessThanOrEqual(1);
      expect(r.stderr + JSON.stringify(r.lines), args.join(' ')).not.toMatch(/permission denied/i);
    }
    const { rows } = await s.pool.query<{ action: string; actor: string; db_user: string }>(
      `SELECT action, actor, db_user FROM timeout_center.audit_log WHERE actor = 'alice' ORDER BY id`,
    );
    expect(rows.map((r) => r.action)).toEqual(expect.arrayContaining(['retry', 'purge', 'pause', 'limit', 'resume', 'cancel']));
    for (const r of rows) expect(r.db_user).toBe(operator.name);
    // It may add audit rows, never rewrite or remove them, nor stamp another login on them.
    await refused(operator.pool, `UPDATE timeout_center.audit_log SET actor = 'bob'`);
    await refused(operator.pool, `DELETE FROM timeout_center.audit_log`);
    await refused(operator.pool, `INSERT INTO timeout_center.audit_log (actor, action, db_user) VALUES ('x', 'y', 'someone_else')`);
    await refused(operator.pool, `UPDATE timeout_center.coordinator_lease SET epoch = epoch + 1`);
    await refused(operator.pool, `INSERT INTO timeout_center.writer_kinds VALUES ('x', 'order.unpaid')`);
  });
});

describe('writers limited to their kinds (writer_kinds)', () => {
  it("one team's writer neither sees nor changes another kind's timeouts", async () => {
    const team = await login('team_unpaid', ROLES.writer);
    await grantOrders(team.name);
    await s.pool.query(`INSERT INTO timeout_center.writer_kinds (role, kind) VALUES ($1, $2)`, [team.name, KIND]);
    // Its first row switched row-level security on.
    expect((await s.pool.query(`SELECT relrowsecurity FROM pg_class WHERE oid = 'timeout_center.timeouts'::regclass`)).rows[0].relrowsecurity).toBe(true);
    await s.pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '920001', now() + interval '1 hour'), ($1, '920002', now() - interval '1 second')`,
      [OTHER_KIND],
    );
    // Its own kind: as before.
    await team.pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '920003', now() + interval '1 hour')`, [KIND]);
    // The other kind: invisible, unchangeable, not insertable, not settled.
    expect((await team.pool.query(`SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE kind = $1::timeout_center.kind`, [OTHER_KIND])).rows[0].n).toBe(
      0,
    );
    const cancel = await team.pool.query(
      `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = $1::timeout_center.kind AND biz_id = '920001' AND state = 'pending'`,
      [OTHER_KIND],
    );
    expect(cancel.rowCount).toBe(0);
    await expect(
      team.pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ($1, '920004', now())`, [OTHER_KIND]),
    ).rejects.toMatchObject({ code: '42501' });
    expect((await team.pool.query(`SELECT outcome FROM timeout_center.settle($1, '920002')`, [OTHER_KIND])).rows).toEqual([{ outcome: 'not_found' }]);
    expect(await s.count(`SELECT count(*) AS n FROM timeout_center.timeouts WHERE biz_id IN ('920001', '920002') AND state = 'pending'`)).toBe(2);
    // A limited writer cannot make its own pending timeout done either: the policy allows pending,
    // dispatched and cancelled.
    await expect(team.pool.query(`UPDATE timeout_center.timeouts SET state = 'done' WHERE biz_id = '920003'`)).rejects.toMatchObject({ code: '42501' });
    // A writer with no row in writer_kinds uses every kind.
    const all = await login('team_all', ROLES.writer);
    expect((await all.pool.query(`SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE kind = $1::timeout_center.kind`, [OTHER_KIND])).rows[0].n).toBe(
      2,
    );
    // A writer's cancel stays an index scan under the policy (the policy's kind is an index condition).
    const plan = await team.pool.query(
      `EXPLAIN UPDATE timeout_center.timeouts SET state = 'cancelled' WHERE kind = 'order.unpaid' AND biz_id = '920003' AND state = 'pending'`,
    );
    const shape = plan.rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(shape).toMatch(/Index Cond: .*kind = ANY \(timeout_center\.writable_kinds\(\)\)/);
    expect(shape).not.toMatch(/Seq Scan/);
    // migrate names the engine logins that do not bypass it, with the SQL.
    const engine = await login('engine_slow', ROLES.engine);
    const again = await runCli(['migrate', '--config', s.configPath, '--no-logs'], s.env());
    expect(again.code).toBe(0);
    expect(again.stderr).toContain(`ALTER ROLE ${engine.name} BYPASSRLS;`);
    // The last row of writer_kinds switches it off again.
    await s.pool.query(`DELETE FROM timeout_center.writer_kinds`);
    expect((await s.pool.query(`SELECT relrowsecurity FROM pg_class WHERE oid = 'timeout_center.timeouts'::regclass`)).rows[0].relrowsecurity).toBe(false);
  });
});

describe('the SECURITY DEFINER functions a writer reaches', () => {
  it('ignore a crafted search_path (shadowing functions, operators, tables) and a temporary orders table', async () => {
    const w = await login('evil', ROLES.writer);
    await grantOrders(w.name);
    await s.pool.query(`GRANT CREATE, TEMPORARY ON DATABASE ${new URL(s.databaseUrl).pathname.slice(1)} TO ${w.name}`);
    const c = await w.pool.connect();
    try {
      await c.query(`CREATE SCHEMA evil;
        CREATE TABLE evil.pwned (who text, what text);
        GRANT INSERT ON evil.pwned TO PUBLIC;
        -- Shadows of what the definer functions call or read, unqualified in a careless body.
        CREATE FUNCTION evil.format(text, text, text) RETURNS text LANGUAGE sql AS $$ INSERT INTO evil.pwned VALUES (current_user, 'format') RETURNING 'x' $$;
        CREATE FUNCTION evil.quote_literal(text) RETURNS text LANGUAGE sql AS $$ INSERT INTO evil.pwned VALUES (current_user, 'quote_literal') RETURNING 'x' $$;
        CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ INSERT INTO evil.pwned VALUES (current_user, 'set_config') RETURNING 'x' $$;
        CREATE FUNCTION evil.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE sql AS $$ INSERT INTO evil.pwned VALUES (current_user, 'pg_has_role') RETURNING true $$;
        CREATE FUNCTION evil.texteq_evil(text, text) RETURNS boolean LANGUAGE sql AS $$ INSERT INTO evil.pwned VALUES (current_user, 'operator =') RETURNING $1 OPERATOR(pg_catalog.=) $2 $$;
        CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq_evil);
        CREATE TABLE evil.store_identity (store text, only_one boolean);
        INSERT INTO evil.store_identity VALUES ('elsewhere', true);
        CREATE TABLE evil.kind_stores (kind text, route_by text, databases text[], range_from bigint[], range_to bigint[]);
        CREATE TABLE evil.shards (id bigint, kind text, held_ids bigint[], state text);
        CREATE TABLE evil.writer_kinds (role text, kind text);
        -- A temporary orders table with a trigger: settle's handler must close public.orders.
        CREATE TEMPORARY TABLE orders (id bigint, status text, closed_at timestamptz);
        CREATE FUNCTION evil.grab() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO evil.pwned VALUES (current_user, 'temp orders'); RETURN NEW; END $$;
        CREATE TRIGGER grab BEFORE UPDATE ON pg_temp.orders FOR EACH ROW EXECUTE FUNCTION evil.grab();
        INSERT INTO pg_temp.orders VALUES (930001, 'unpaid');
        SET search_path = evil, pg_temp, public`);
      // The section 3 statements and settle, under that search_path.
      await c.query(`INSERT INTO public.orders (id, status) VALUES (930001, 'unpaid'), (930002, 'unpaid')`);
      await c.query(
        `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '930001', now()), ('order.unpaid', '930002', now() + interval '1 hour')`,
      );
      const cancel = await c.query(
        `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now() WHERE kind = 'order.unpaid' AND biz_id = '930002' AND state = 'pending'`,
      );
      expect(cancel.rowCount).toBe(1);
      expect((await c.query(`SELECT outcome FROM timeout_center.settle('order.unpaid', '930001')`)).rows).toEqual([{ outcome: 'applied' }]);
      expect((await c.query(`SELECT * FROM evil.pwned`)).rows).toEqual([]);
      expect((await c.query(`SELECT status FROM pg_temp.orders`)).rows).toEqual([{ status: 'unpaid' }]);
    } finally {
      c.release();
    }
    expect((await s.pool.query(`SELECT status FROM orders WHERE id = 930001`)).rows).toEqual([{ status: 'closed' }]);
  });

  it('take SQL-injection payloads as data', async () => {
    const { pool: w, name } = await login('inject', ROLES.writer);
    await grantOrders(name);
    const payloads = [
      "1'); DELETE FROM orders; --",
      "1' OR '1'='1",
      'x$$; DROP TABLE orders; $$',
      "'; UPDATE timeout_center.coordinator_lease SET epoch = 0; --",
    ];
    const before = await s.count(`SELECT count(*) AS n FROM orders`);
    const epoch = await s.count(`SELECT epoch AS n FROM timeout_center.coordinator_lease`);
    for (const p of payloads) {
      await w.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, payload) VALUES ('order.unpaid', $1, now(), $2)`, [p, JSON.stringify({ p })]);
      const r = await w.query(`SELECT outcome FROM timeout_center.settle('order.unpaid', $1)`, [p]);
      // bigint = ANY(text[]) cannot cast the payload: the handler fails, nothing changes.
      expect(['failed', 'skipped']).toContain(r.rows[0].outcome);
      expect(
        (await w.query(`SELECT outcome FROM timeout_center.settle($1, '1')`, [p]).catch((e: Error) => ({ rows: [{ outcome: e.message }] }))).rows[0].outcome,
      ).toMatch(/unknown timeout kind|not_found/);
    }
    expect(await s.count(`SELECT count(*) AS n FROM orders`)).toBe(before);
    expect(await s.count(`SELECT epoch AS n FROM timeout_center.coordinator_lease`)).toBe(epoch);
  });
});

describe('writer in a store (README section 3c): section 3 as written, in the order own database', () => {
  it('the insert check (store_identity, kind_stores) runs for the writer; an insert into the wrong store is refused naming the right one', async () => {
    const stores = await Promise.all(['orders_0', 'orders_1'].map((n) => createTestDatabase(`roles_${n}`, { empty: true })));
    const storePools = stores.map((d) => new pg.Pool({ connectionString: d.url, max: 2 }).on('error', () => {}));
    pools.push(...storePools);
    const center = await createTestDatabase('roles_center');
    try {
      await Promise.all(storePools.map((p) => createOrdersSchema(p)));
      const configPath = writeConfig({
        redisKeyPrefix: testKeyPrefix('roles-stores'),
        kinds: {
          [KIND]: {
            store: 'beside',
            handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: ['orders_0', 'orders_1'] } },
          },
        },
        businessDatabases: { orders_0: { url: stores[0]!.url }, orders_1: { url: stores[1]!.url } },
      });
      const migrated = await runCli(['migrate', '--config', configPath, '--no-logs'], { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL }, 60_000);
      expect(migrated.code, migrated.stderr).toBe(0);
      expect(migrated.stderr).toBe('');
      const w = await login('store_writer', ROLES.writer);
      const asWriter = stores.map((d) => {
        const u = new URL(d.url);
        u.username = w.name;
        const p = new pg.Pool({ connectionString: u.toString(), max: 1 }).on('error', () => {});
        pools.push(p);
        return p;
      });
      for (const p of storePools) await p.query(`GRANT SELECT, INSERT, UPDATE ON orders TO ${w.name}; GRANT INSERT ON order_transitions TO ${w.name}`);
      // Order 42 belongs in orders_0 (42 mod 2): section 3 as written there.
      await run(asWriter[0]!, namedBlock('create').text);
      const paid = await run(asWriter[0]!, namedBlock('pay').text);
      expect(paid[statements(namedBlock('pay').text).findIndex((st) => /^UPDATE orders\b/.test(st))]!.rowCount).toBe(1);
      expect((await storePools[0]!.query(`SELECT state FROM timeout_center.timeouts WHERE biz_id = '42'`)).rows).toEqual([{ state: 'cancelled' }]);
      // Order 43 belongs in orders_1: refused in orders_0 by the check, not by a permission.
      await expect(run(asWriter[0]!, forOrder(namedBlock('create').text, 43))).rejects.toThrow(/belongs in store orders_1, not in store orders_0/);
      await run(asWriter[1]!, forOrder(namedBlock('create').text, 43));
      // The store's engine tables are the writer's no more than the center's.
      await refused(asWriter[0]!, 'SELECT * FROM timeout_center.shards');
      await refused(asWriter[0]!, 'SELECT * FROM timeout_center.store_identity');
    } finally {
      await Promise.all(storePools.map((p) => p.end().catch(() => {})));
      await Promise.all([...stores, center].map((d) => d.drop()));
    }
  });
});
