// The console in a real browser (Debian's chromium driven by playwright-core) against real
// processes: a `run --console` process (coordinator + worker + console, basic auth) and a
// separate `console --read-only --base-path /tc` (token auth), on a real database and Redis. It
// opens every page (screenshots, see SHOTS), pauses and resumes a kind, retries a
// failed timeout and sees it done, reruns a shard, finds an order by id and moves and cancels its
// timeout, and checks auth, CSRF, read-only and the refusal to serve open on a public address.
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { requireTools, toolCommand } from '../helpers/system-tools.js';
import { tearDown } from '../helpers/teardown.js';

// Debian's chromium on PATH, or CHROMIUM_PATH.
const browserTool = requireTools('chromium');
// Screenshots of every page: into docs/console/ (embedded in docs/console.md) when
// UPDATE_CONSOLE_SCREENSHOTS=1, else into a temporary directory so a test run leaves the tree clean.
const SHOTS =
  process.env['UPDATE_CONSOLE_SCREENSHOTS'] === '1'
    ? fileURLToPath(new URL('../../docs/console/', import.meta.url))
    : `${mkdtempSync(join(tmpdir(), 'tc-console-shots-'))}/`;
const USER = 'alice';
const PASSWORD = 'console-test-password';
const TOKEN = 'readonly-token-0123456789abcdef';
const ORDERS = 200; // every 50th is poison (its close raises): 4 failed timeouts

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(browserTool.skip)(browserTool.title('console in a real browser'), () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let runner: CliProcess;
  let readOnly: CliProcess;
  let browser: Browser;
  let page: Page;
  let roPage: Page;
  let url: string;
  let roUrl: string;

  const count = async (sql: string, values: unknown[] = []) => (await pool.query<{ n: number }>(sql, values)).rows[0]!.n;
  const shot = (name: string) => page.screenshot({ path: `${SHOTS}${name}.png`, fullPage: true });

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    db = await createTestDatabase('console');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    const configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix('console'),
      kinds: {
        'order.unpaid': { shardSize: 50, maxAttempts: 1, handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.unshipped': { handler: { type: 'sql', sql: CLOSE_SQL } },
        // Declared but served by no worker (worker.kinds leaves it out): the warnings page says so.
        'order.unrefunded': { handler: { type: 'sql', sql: CLOSE_SQL } },
      },
      coordinator: { lockTtlMs: 3000 },
      worker: { concurrency: 2, leaseMs: 15_000, kinds: ['order.unpaid', 'order.unshipped'] },
      alerts: { lagSlaMs: 30_000 },
    });
    const env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
    await pool.query(`INSERT INTO orders (id, status, poison) SELECT g, 'unpaid', g % 50 = 0 FROM generate_series(1, $1::int) g`, [ORDERS]);
    await pool.query(`INSERT INTO orders (id, status) VALUES (5001, 'unpaid')`);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, now() - interval '1 s' FROM generate_series(1, $1::int) g`,
      [ORDERS],
    );
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unshipped', '5001', now() + interval '1 hour')`);

    const [port, roPort] = await Promise.all([freePort(), freePort()]);
    runner = spawnCli('run --console', ['run', '--console', String(port)], { ...env, TC_CONSOLE_USER: USER, TC_CONSOLE_PASSWORD: PASSWORD });
    readOnly = spawnCli('console --read-only', ['console', '--port', String(roPort), '--read-only', '--base-path', '/tc'], {
      DATABASE_URL: db.url,
      TC_CONSOLE_TOKEN: TOKEN,
      TC_CONSOLE_TOKEN_NAME: 'viewer',
    });
    url = `http://127.0.0.1:${port}`;
    roUrl = `http://127.0.0.1:${roPort}/tc`;
    await Promise.all([runner.waitForMsg('console listening'), readOnly.waitForMsg('console listening'), runner.waitForMsg('worker started')]);
    await until(
      'the due timeouts to drain',
      async () =>
        (await count(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND state NOT IN ('done', 'failed')`)) === 0 &&
        (await count(`SELECT count(*)::int AS n FROM timeout_center.scans WHERE state <> 'reduced'`)) === 0,
      60_000,
    );

    // Two minutes late, over the 30 s SLA, and nobody serves its kind.
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unrefunded', '7001', now() - interval '2 minutes')`);

    browser = await chromium.launch({ executablePath: toolCommand('chromium')[0], args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    const context = await browser.newContext({ httpCredentials: { username: USER, password: PASSWORD }, viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
    const roContext = await browser.newContext({ extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` }, viewport: { width: 1280, height: 800 } });
    roPage = await roContext.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await readOnly?.stop();
    await runner?.stop();
    await tearDown({ pool, db });
  });

  it('asks for credentials: no or wrong basic auth gets 401 with a challenge; a form post without the CSRF token is refused', async () => {
    const none = await fetch(`${url}/kinds`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Basic /);
    const wrong = await fetch(`${url}/kinds`, { headers: { authorization: `Basic ${Buffer.from(`${USER}:nope`).toString('base64')}` } });
    expect(wrong.status).toBe(401);
    const basic = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`;
    const forged = await fetch(`${url}/actions/kinds/order.unpaid/pause`, {
      method: 'POST',
      headers: { authorization: basic, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'back=/kinds',
    });
    expect(forged.status).toBe(403);
    expect(await forged.text()).toContain('CSRF');
    const crossSite = await fetch(`${url}/api/kinds/order.unpaid/pause`, {
      method: 'POST',
      headers: { authorization: basic, 'content-type': 'application/json', origin: 'https://evil.example' },
      body: '{}',
    });
    expect(crossSite.status).toBe(403);
    expect(await count(`SELECT count(*)::int AS n FROM timeout_center.kinds WHERE paused`)).toBe(0);
  });

  it('opens every page', async () => {
    await page.goto(`${url}/`);
    await expect(page.locator('h1').textContent()).resolves.toBe('Overview');
    await expect(page.locator('#backlog tr[data-kind="order.unpaid"]').textContent()).resolves.toContain('order.unpaid');
    expect(await page.locator('#leader').textContent()).toMatch(/epoch \d+/);
    expect(await page.locator('#workers tr').count()).toBe(2); // header + the run process's worker
    expect(await page.locator('svg.chart rect').count()).toBeGreaterThan(0);
    await shot('overview');
    for (const [path, title] of [
      ['/kinds', 'Kinds'],
      ['/scans', 'Scans'],
      ['/timeouts', 'Timeouts'],
      ['/failed', 'Failed timeouts'],
      ['/warnings', 'Warnings'],
      ['/audit', 'Audit log'],
    ] as const) {
      const res = await page.goto(`${url}${path}`);
      expect(res?.status(), path).toBe(200);
      expect(await page.locator('h1').textContent()).toBe(title);
    }
    await page.goto(`${url}/warnings`);
    expect(await page.locator('#relations').textContent()).toContain('timeouts');
    const warnings = await page.locator('#warnings').textContent();
    expect(warnings).toContain('order.unrefunded: no live worker serves this kind');
    expect(warnings).toMatch(/order\.unrefunded: oldest due timeout is \d+ s late, over the 30 s SLA/);
    await shot('warnings');
    await page.goto(`${url}/scans`);
    await shot('scans');
    // The JSON API reads the same data.
    const api = (await (await page.request.get(`${url}/api/kinds`)).json()) as { kind: string; paused: boolean }[];
    expect(api.map((k) => k.kind)).toEqual(['order.unpaid', 'order.unrefunded', 'order.unshipped']);
  });

  it('pauses a kind (shown, audited, nothing of it starts), then resumes it and its backlog drains', async () => {
    await page.goto(`${url}/kinds`);
    await page.locator('tr[data-kind="order.unpaid"] button', { hasText: 'Pause' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('paused order.unpaid');
    expect(await page.locator('tr[data-kind="order.unpaid"] .kind-state').textContent()).toBe('paused');
    await shot('kinds');
    const audit = await pool.query(`SELECT actor, action, kind FROM timeout_center.audit_log WHERE action = 'pause'`);
    expect(audit.rows).toEqual([{ actor: USER, action: 'pause', kind: 'order.unpaid' }]);

    const shardsBefore = await count(`SELECT coalesce(max(id), 0)::int AS n FROM timeout_center.shards WHERE kind = 'order.unpaid'`);
    await pool.query(`INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1001, 1100) g`);
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, now() FROM generate_series(1001, 1100) g`);
    await page.goto(`${url}/`);
    expect(await page.locator('#backlog tr[data-kind="order.unpaid"] .paused').count()).toBe(1);
    // Shards stop: for three seconds (several ticks) no new shard of the kind, the rows wait.
    await new Promise((r) => setTimeout(r, 3000));
    expect(await count(`SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = 'order.unpaid' AND id > $1`, [shardsBefore])).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE biz_id::int BETWEEN 1001 AND 1100 AND state = 'pending'`)).toBe(100);

    await page.goto(`${url}/kinds`);
    await page.locator('tr[data-kind="order.unpaid"] button', { hasText: 'Resume' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('resumed order.unpaid');
    expect(await page.locator('tr[data-kind="order.unpaid"] .kind-state').textContent()).toBe('active');
    await until(
      'the resumed kind to drain',
      async () =>
        (await count(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE biz_id::int BETWEEN 1001 AND 1100 AND state = 'done'`)) === 100,
    );
    expect(await count(`SELECT count(*)::int AS n FROM timeout_center.shards WHERE kind = 'order.unpaid' AND id > $1`, [shardsBefore])).toBeGreaterThan(0);

    // Limits: set, shown, audited; then removed.
    await page.locator('tr[data-kind="order.unshipped"] input[name="maxRunningShards"]').fill('2');
    await page.locator('tr[data-kind="order.unshipped"] input[name="rateLimit"]').fill('500');
    await page.locator('tr[data-kind="order.unshipped"] button', { hasText: 'Set limits' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('at most 2 running shards, 500 timeouts/s');
    const limits = await pool.query(
      `SELECT max_running_shards, rate_limit::float8 AS rate_limit, controls_changed_by FROM timeout_center.kinds WHERE kind = 'order.unshipped'`,
    );
    expect(limits.rows[0]).toEqual({ max_running_shards: 2, rate_limit: 500, controls_changed_by: USER });
    await page.locator('tr[data-kind="order.unshipped"] input[name="rateLimit"]').fill('-1');
    await page.locator('tr[data-kind="order.unshipped"] button', { hasText: 'Set limits' }).click();
    await expect(page.locator('.flash.err').textContent()).resolves.toContain('rate limit must be');
  });

  it('retries a failed timeout and sees it done; reruns a shard; retries all matching an error text, and a selection', async () => {
    await page.goto(`${url}/failed?kind=order.unpaid`);
    await expect(page.locator('#failed-total').textContent()).resolves.toContain('4 failed timeouts match');
    await shot('failed');
    const id = (
      await pool.query<{ id: number }>(
        `SELECT id::int AS id FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND biz_id = '50' AND state = 'failed'`,
      )
    ).rows[0]!.id;
    await pool.query(`UPDATE orders SET poison = false WHERE id = 50`); // the cause is fixed
    await page.locator(`tr[data-timeout="${id}"] button`, { hasText: 'Retry' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('retried 1 failed timeout');
    await until(
      'the retried timeout to be done',
      async () => (await count(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE id = $1 AND state = 'done'`, [id])) === 1,
    );
    await page.goto(`${url}/timeouts?kind=order.unpaid&bizId=50`);
    expect(await page.locator(`#history tr[data-timeout="${id}"] td.state-done`).count()).toBe(1);

    // Rerun the shard that failed order 100: its failed timeouts go back to pending.
    const shard = (
      await pool.query<{ shard_id: number; scan_id: number }>(
        `SELECT t.shard_id::int AS shard_id, sh.scan_id::int AS scan_id FROM timeout_center.all_timeouts t JOIN timeout_center.shards sh ON sh.id = t.shard_id
        WHERE t.kind = 'order.unpaid' AND t.biz_id = '100' AND t.state = 'failed'`,
      )
    ).rows[0]!;
    await pool.query(`UPDATE orders SET poison = false WHERE id = 100`);
    await page.goto(`${url}/scans/${shard.scan_id}`);
    await shot('scan');
    await page.locator(`tr[data-shard="${shard.shard_id}"] button`, { hasText: 'Rerun this shard' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain(`shard ${shard.shard_id}: 1 failed timeout(s) back to pending`);
    await until(
      'the rerun timeout to be done',
      async () => (await count(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE biz_id = '100' AND state = 'done'`)) === 1,
    );

    // Orders 150 and 200 are left: retry "all matching" an error text, then a ticked selection.
    await pool.query(`UPDATE orders SET poison = false WHERE id IN (150, 200)`);
    await page.goto(`${url}/failed`);
    await page.locator('#filter input[name="error"]').fill('ORDER 150 cannot');
    await page.locator('#filter button').click();
    await expect(page.locator('#failed-total').textContent()).resolves.toContain('1 failed timeout match');
    await page.locator('button', { hasText: 'Retry all 1 matching' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('retried 1 failed timeout');
    await page.goto(`${url}/failed`);
    const last = (await pool.query<{ id: number }>(`SELECT id::int AS id FROM timeout_center.all_timeouts WHERE biz_id = '200' AND state = 'failed'`)).rows[0]!
      .id;
    await page.locator(`tr[data-timeout="${last}"] input[type="checkbox"]`).check();
    await page.locator('button', { hasText: 'Retry selected' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('retried 1 failed timeout');
    await until(
      'every order.unpaid timeout to be done',
      async () => (await count(`SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND state <> 'done'`)) === 0,
    );

    const actions = (
      await pool.query<{ action: string; actor: string; target: string }>(
        `SELECT action, actor, target FROM timeout_center.audit_log WHERE action IN ('retry', 'rerun_shard') ORDER BY id`,
      )
    ).rows;
    expect(actions).toEqual([
      { action: 'retry', actor: USER, target: `ids ${id}` },
      { action: 'rerun_shard', actor: USER, target: `shard ${shard.shard_id}` },
      { action: 'retry', actor: USER, target: 'error ~ "ORDER 150 cannot"' },
      { action: 'retry', actor: USER, target: `ids ${last}` },
    ]);
  });

  it('finds an order by id, reschedules and cancels its pending timeout', async () => {
    await page.goto(`${url}/timeouts`);
    await page.locator('#find select[name="kind"]').selectOption('order.unshipped');
    await page.locator('#find input[name="bizId"]').fill('5001');
    await page.locator('#find button').click();
    expect(await page.locator('#history td.state-pending').count()).toBe(1);
    await shot('timeouts');
    const due = new Date(Date.now() + 2 * 3_600_000);
    due.setMilliseconds(0);
    await page.locator('input[name="dueAt"]').fill(due.toISOString());
    await page.locator('button', { hasText: 'Reschedule' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain(`moved order.unshipped 5001 to ${due.toISOString()}`);
    const row = await pool.query(`SELECT due_at FROM timeout_center.all_timeouts WHERE kind = 'order.unshipped' AND biz_id = '5001'`);
    expect((row.rows[0].due_at as Date).getTime()).toBe(due.getTime());
    await page.locator('button', { hasText: 'Cancel' }).click();
    await expect(page.locator('.flash.ok').textContent()).resolves.toContain('cancelled the pending order.unshipped timeout of 5001');
    expect(await page.locator('#history td.state-cancelled').count()).toBe(1);
    await page.goto(`${url}/audit`);
    expect(await page.locator('#audit tr[data-action="cancel"]').count()).toBe(1);
    expect(await page.locator('#audit tr[data-action="reschedule"]').count()).toBe(1);
    await shot('audit');
  });

  it('read-only console under /tc with a token: pages and links carry the sub-path, every action is refused', async () => {
    const res = await roPage.goto(`${roUrl}/kinds`);
    expect(res?.status()).toBe(200);
    expect(await roPage.locator('header a', { hasText: 'Scans' }).getAttribute('href')).toBe('/tc/scans');
    expect(await roPage.locator('header .who').textContent()).toContain('token:viewer');
    await roPage.screenshot({ path: `${SHOTS}read-only.png`, fullPage: true });
    await roPage.locator('header a', { hasText: 'Overview' }).click();
    expect(await roPage.locator('h1').textContent()).toBe('Overview');
    await roPage.goto(`${roUrl}/kinds`);
    await roPage.locator('tr[data-kind="order.unpaid"] button', { hasText: 'Pause' }).click();
    expect(await roPage.locator('h1').textContent()).toBe('Refused');
    expect(await roPage.locator('#message').textContent()).toContain('read-only');
    const api = await fetch(`${roUrl}/api/kinds/order.unpaid/pause`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(api.status).toBe(403);
    expect(await count(`SELECT count(*)::int AS n FROM timeout_center.kinds WHERE paused`)).toBe(0);
    expect((await fetch(`${roUrl}/kinds`)).status).toBe(401);
  });

  it('refuses to serve without auth on a non-loopback address', async () => {
    const r = await runCli(['console', '--host', '0.0.0.0', '--port', '0'], {
      DATABASE_URL: db.url,
      TC_CONSOLE_TOKEN: undefined,
      TC_CONSOLE_USER: undefined,
      TC_CONSOLE_PASSWORD: undefined,
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('refusing to serve the console on 0.0.0.0 without authentication');
  });
});
