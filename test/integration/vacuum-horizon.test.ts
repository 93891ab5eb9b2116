// What holds back VACUUM, seen by operators (docs/vacuum-horizon.md), with real processes on a
// private PostgreSQL (max_prepared_transactions on; the shared server has it at 0). Another role's
// session holds a REPEATABLE READ snapshot, and a prepared transaction is left behind, in the
// center's database; a second report holds one in a business database of the config; then:
//   - the leading coordinator, running as a role that is NOT a superuser and holds only pg_monitor
//     (plus the center's table rights), exports tc_vacuum_horizon_* naming them (the business
//     database's under its name) and raises the vacuum_horizon alert (log sink);
//   - `timeout-center status` names both with what to do, and exits 1;
//   - the console's warnings (page and JSON) name both;
//   - a role without pg_monitor still runs status: the snapshot is hidden from it, which status
//     says (GRANT pg_monitor), and the prepared transaction (visible to every role) is still named;
//   - once both end, the series go.
import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeConfig } from '../helpers/orders.js';
import { CLI, killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { startPostgres, type PostgresServer } from '../helpers/servers.js';
import { testKeyPrefix, TEST_REDIS_URL, uniqueName } from '../helpers/services.js';
import { metric } from '../helpers/metrics-text.js';

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** A CLI verb's stdout and exit code. */
function cli(args: string[], env: Record<string, string>): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const withUser = (url: string, user: string) => {
  const u = new URL(url);
  u.username = user;
  return u.toString();
};

describe('vacuum horizon: metric, alert, status and console name what holds it', () => {
  let server: PostgresServer;
  let admin: pg.Pool;
  let report: pg.Client;
  let preparer: pg.Client;
  let shopReport: pg.Client;
  let shopPid = 0;
  let coordinator: CliProcess;
  let consoleProc: CliProcess | undefined;
  let centerUrl: string;
  let engineEnv: Record<string, string>;
  let blindEnv: Record<string, string>;
  let metricsPort = 0;
  let reportPid = 0;
  const engine = uniqueName('engine');
  const blind = uniqueName('blind');
  const gid = 'forgotten-import-42';

  beforeAll(async () => {
    server = await startPostgres({ settings: { max_prepared_transactions: '4' } });
    const root = new pg.Client({ connectionString: server.url() });
    await root.connect();
    await root.query('CREATE DATABASE center');
    await root.query('CREATE DATABASE shop');
    // The engine's role: no superuser, pg_monitor to see every session; a second role without it.
    await root.query(`CREATE ROLE ${engine} LOGIN IN ROLE pg_monitor`);
    await root.query(`CREATE ROLE ${blind} LOGIN`);
    await root.end();
    centerUrl = server.url('center');
    const base = {
      redisKeyPrefix: testKeyPrefix('horizon'),
      kinds: { 'order.unpaid': { shardSize: 100, handler: { type: 'sql' as const, sql: 'SELECT 1 WHERE false AND $1::text[] IS NOT NULL' } } },
      coordinator: { lockTtlMs: 3000, horizonCheckIntervalMs: 1000 },
      alerts: { vacuumHorizonMs: 2000 },
    };
    // The engine's config names a business database (no kind runs there: only its horizon is read).
    const configPath = writeConfig({ ...base, businessDatabases: { shop: { url: withUser(server.url('shop'), engine) } } });
    const migrated = await runCli(['migrate'], { DATABASE_URL: centerUrl, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: writeConfig(base) });
    expect(migrated.code, migrated.stderr).toBe(0);
    admin = new pg.Pool({ connectionString: centerUrl, max: 2 });
    // The center's rights for both roles (roles and grants are issue 46's; here only what they use).
    for (const role of [engine, blind]) {
      await admin.query(`GRANT USAGE ON SCHEMA timeout_center TO ${role}`);
      await admin.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA timeout_center TO ${role}`);
      await admin.query(`GRANT USAGE ON ALL SEQUENCES IN SCHEMA timeout_center TO ${role}`);
      await admin.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA timeout_center TO ${role}`);
    }
    await admin.query('CREATE TABLE imports (id int)');
    engineEnv = { DATABASE_URL: withUser(centerUrl, engine), REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    blindEnv = { ...engineEnv, DATABASE_URL: withUser(centerUrl, blind) };

    // The holders: a report in REPEATABLE READ (as postgres: another role than the engine's) and a
    // prepared transaction that nobody resolves.
    report = new pg.Client({ connectionString: centerUrl, application_name: 'nightly report' });
    await report.connect();
    reportPid = (await report.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await report.query('SELECT count(*) FROM timeout_center.timeouts');
    preparer = new pg.Client({ connectionString: centerUrl });
    await preparer.connect();
    await preparer.query('BEGIN');
    await preparer.query('INSERT INTO imports VALUES (1)');
    await preparer.query(`PREPARE TRANSACTION '${gid}'`);

    shopReport = new pg.Client({ connectionString: server.url('shop'), application_name: 'shop report' });
    await shopReport.connect();
    shopPid = (await shopReport.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await shopReport.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await shopReport.query('SELECT count(*) FROM pg_class');

    coordinator = spawnCli('coordinator', ['coordinator', '--port', '0'], engineEnv);
    await coordinator.waitForMsg('became leader', 20_000);
    metricsPort = Number((await coordinator.waitForMsg('serving /metrics, /healthz, /readyz', 20_000))['port']);
    // Past the 2 s threshold.
    await new Promise((r) => setTimeout(r, 2500));
  }, 120_000);

  afterAll(async () => {
    await consoleProc?.stop().catch(() => {});
    await coordinator?.stop().catch(() => {});
    const leaked = await killAll();
    await report?.end().catch(() => {});
    await shopReport?.end().catch(() => {});
    await preparer?.end().catch(() => {});
    await admin?.query(`ROLLBACK PREPARED '${gid}'`).catch(() => {});
    await admin?.end();
    await server?.stop();
    expect(leaked, 'processes still running after the test').toEqual([]);
  });

  const scrape = async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();

  it('the leader exports the oldest holder of each kind, as a pg_monitor role, and alerts once per holder', async () => {
    const text = await until('both holders in /metrics', async () => {
      const t = await scrape();
      const backend = metric(t, 'tc_vacuum_horizon_age_seconds', { database: 'center', holder: 'backend', pid: String(reportPid) });
      const prepared = metric(t, 'tc_vacuum_horizon_age_seconds', { database: 'center', holder: 'prepared_transaction', gid });
      return backend !== undefined && backend >= 2 && prepared !== undefined && prepared >= 2 ? t : undefined;
    });
    expect(metric(text, 'tc_vacuum_horizon_age_seconds', { holder: 'backend', application_name: 'nightly report' })).toBeGreaterThanOrEqual(2);
    expect(metric(text, 'tc_vacuum_horizon_age_xids', { database: 'center', holder: 'backend', pid: String(reportPid) })).toBeGreaterThanOrEqual(0);
    expect(metric(text, 'tc_vacuum_horizon_age_xids', { database: 'center', holder: 'prepared_transaction', gid })).toBeGreaterThanOrEqual(0);
    expect(metric(text, 'tc_vacuum_horizon_holder_info', { database: 'center', holder: 'backend', pid: String(reportPid), state: 'idle in transaction' })).toBe(
      1,
    );
    expect(metric(text, 'tc_vacuum_horizon_sees_all_sessions', { database: 'center' })).toBe(1);
    // The business database, read by the center's leader, under its name.
    await until('the business database in /metrics', async () => {
      const t = await scrape();
      const age = metric(t, 'tc_vacuum_horizon_age_seconds', { database: 'shop', holder: 'backend', pid: String(shopPid), application_name: 'shop report' });
      return age !== undefined && age >= 2 ? true : undefined;
    });
    const alerts = await until('three vacuum_horizon alerts', async () => {
      const found = coordinator.lines.filter((l) => l['alert'] === 'vacuum_horizon');
      return found.length >= 3 ? found : undefined;
    });
    const messages = alerts.map((a) => String(a.msg));
    expect(messages.some((m) => m.includes(`backend pid ${reportPid} (nightly report`) && m.includes(`pg_terminate_backend(${reportPid})`))).toBe(true);
    expect(messages.some((m) => m.includes(`prepared transaction '${gid}'`) && m.includes(`ROLLBACK PREPARED '${gid}'`))).toBe(true);
    expect(messages.some((m) => m.startsWith(`ALERT vacuum_horizon: shop: backend pid ${shopPid} (shop report`))).toBe(true);
    // Once per holder: later readings (every second) do not repeat it.
    await new Promise((r) => setTimeout(r, 2500));
    expect(coordinator.lines.filter((l) => l['alert'] === 'vacuum_horizon')).toHaveLength(alerts.length);
  });

  it('status names the three holders (the business database under its name) with what to do, and exits 1', async () => {
    const status = cli(['status'], engineEnv);
    expect(status.code, status.stderr).toBe(1);
    expect(status.stdout).toContain(`center: backend pid ${reportPid} (nightly report, postgres, idle in transaction`);
    expect(status.stdout).toContain(`SELECT pg_terminate_backend(${reportPid})`);
    expect(status.stdout).toContain(`center: prepared transaction '${gid}'`);
    expect(status.stdout).toContain(`ROLLBACK PREPARED '${gid}'`);
    expect(status.stdout).toContain(`shop: backend pid ${shopPid} (shop report`);
    expect(status.stdout).toMatch(/Vacuum horizon: 3 holders past 2 s/);
    const json = JSON.parse(cli(['status', '--json'], engineEnv).stdout) as {
      problems: { topic: string; message: string }[];
      vacuumHorizon: {
        database: string;
        seesAllSessions: boolean;
        holders: { holder: string; pid: number | null; gid: string | null; severity: string | null }[];
      }[];
    };
    expect(json.problems.filter((p) => p.topic === 'vacuum-horizon')).toHaveLength(3);
    const center = json.vacuumHorizon.find((d) => d.database === 'center')!;
    expect(center.seesAllSessions).toBe(true);
    expect(center.holders).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ holder: 'backend', pid: reportPid, severity: 'warning' }),
        expect.objectContaining({ holder: 'prepared_transaction', gid, severity: 'warning' }),
      ]),
    );
  });

  it('without pg_monitor: status says the sessions are hidden and what to grant, and still names the prepared transaction', async () => {
    const status = cli(['status'], blindEnv);
    expect(status.code, status.stderr).toBe(1);
    expect(status.stdout).toContain(`role ${blind} cannot see other roles' sessions`);
    expect(status.stdout).toContain(`GRANT pg_monitor TO ${blind}`);
    expect(status.stdout).not.toContain(`backend pid ${reportPid}`);
    expect(status.stdout).toContain(`prepared transaction '${gid}'`);
  });

  it('the console warnings name both (page and JSON)', async () => {
    consoleProc = spawnCli('console', ['console', '--port', '0'], engineEnv);
    const url = `http://127.0.0.1:${Number((await consoleProc.waitForMsg('console listening', 20_000))['port'])}`;
    const json = (await (await fetch(`${url}/api/warnings`)).json()) as { warnings: { topic: string; message: string }[] };
    const horizon = json.warnings.filter((w) => w.topic === 'vacuum_horizon').map((w) => w.message);
    expect(horizon.some((m) => m.includes(`backend pid ${reportPid} (nightly report`) && m.includes('pg_terminate_backend'))).toBe(true);
    expect(horizon.some((m) => m.includes(`prepared transaction '${gid}'`))).toBe(true);
    const page = await (await fetch(`${url}/warnings`)).text();
    expect(page).toContain(`backend pid ${reportPid} (nightly report`);
    expect(page).toContain(`gid ${gid}`);
  });

  it('once the holders end, their series go', async () => {
    await report.query('ROLLBACK');
    await shopReport.query('ROLLBACK');
    await admin.query(`ROLLBACK PREPARED '${gid}'`);
    await until('the holders gone from /metrics', async () => {
      const t = await scrape();
      const gone =
        metric(t, 'tc_vacuum_horizon_age_xids', { holder: 'backend', pid: String(reportPid) }) === undefined &&
        metric(t, 'tc_vacuum_horizon_age_xids', { holder: 'prepared_transaction', gid }) === undefined;
      return gone ? true : undefined;
    });
    const status = cli(['status'], engineEnv);
    expect(status.stdout).toMatch(/Vacuum horizon: nothing has held back VACUUM longer than 2 s/);
  });
});
