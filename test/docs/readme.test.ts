// README.md's code blocks, run as written (read from README.md, so the documentation cannot drift
// from what is tested):
//   - every ```sql block runs against a fresh database (migrated, the kinds of the example config,
//     an `orders` table), in README order, and the section 3 examples do what the text says;
//   - the section 3 payment races closes at the due instant, with a fleet running: no order is
//     both closed and paid, no deadlock on either side;
//   - the section 3d ```sh blocks (curl) run as written against a live `timeout-center api`, in README
//     order, and answer what the text says;
//   - every other ```sh command names an npm script, a CLI verb and flags, or a file that exists (the
//     commands that start a cluster are exercised by test/docs/npm-start.test.ts and
//     test/deploy/manifests.test.ts);
//   - section 3c's operator commands run as written, with the stores example as the config, against
//     a center and three stores, and exit as their comments say (0 unless a comment says "exit N").
// Examples are about order 42; other orders run the same text with 42 replaced (readme-blocks.ts).
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SETTLE_OUTCOMES } from '../../src/api/schemas.js';
import { CLI, killAll, runCli, spawnCli } from '../helpers/processes.js';
import { createOrdersSchema } from '../helpers/orders.js';
import { freePort } from '../helpers/servers.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { requireTools } from '../helpers/system-tools.js';
import { report, Scenario } from '../faults/harness.js';
import { paymentRace } from './payment-race.js';
import { forOrder, namedBlock, readmeBlocks, statements } from './readme-blocks.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let s: Scenario;

beforeAll(async () => {
  s = await Scenario.create('readme', { kind: { shardSize: 50 }, worker: { concurrency: 3 } });
});

afterAll(async () => {
  await killAll();
  await s?.close();
});

async function run(text: string): Promise<pg.QueryResult[]> {
  const r = (await s.pool.query(text)) as unknown as pg.QueryResult | pg.QueryResult[];
  return Array.isArray(r) ? r : [r];
}

/** The result of the block's statement that updates `orders`. */
function orderUpdate(text: string, results: pg.QueryResult[]): pg.QueryResult {
  const i = statements(text).findIndex((st) => /^UPDATE orders\b/i.test(st));
  expect(i, 'the block updates orders').toBeGreaterThanOrEqual(0);
  return results[i]!;
}

describe('README section 3 (plain SQL from a service)', () => {
  it('create, pay, reschedule: as written, they do what the text says', async () => {
    const create = namedBlock('create').text;
    const pay = namedBlock('pay').text;
    const reschedule = namedBlock('reschedule').text;
    await run(create);
    expect((await s.pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE biz_id = '42'`)).rows).toEqual([{ state: 'pending' }]);
    // Pay while unpaid: UPDATE 1, paid; the timeout is cancelled.
    expect(orderUpdate(pay, await run(pay)).rowCount).toBe(1);
    expect((await s.pool.query(`SELECT status FROM orders WHERE id = 42`)).rows).toEqual([{ status: 'paid' }]);
    expect((await s.pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE biz_id = '42'`)).rows).toEqual([{ state: 'cancelled' }]);
    // Paying again (or paying a closed order) is refused: UPDATE 0, nothing changes.
    expect(orderUpdate(pay, await run(pay)).rowCount).toBe(0);
    // A closed order is never paid.
    await run(forOrder(create, 43));
    await s.pool.query(`UPDATE orders SET status = 'closed' WHERE id = 43`);
    expect(orderUpdate(pay, await run(forOrder(pay, 43))).rowCount).toBe(0);
    expect((await s.pool.query(`SELECT status FROM orders WHERE id = 43`)).rows).toEqual([{ status: 'closed' }]);
    // Reschedule moves a pending timeout only.
    await run(forOrder(create, 44));
    const before = await s.pool.query(`SELECT due_at FROM timeout_center.all_timeouts WHERE biz_id = '44'`);
    expect((await run(forOrder(reschedule, 44)))[0]!.rowCount).toBe(1);
    const after = await s.pool.query(`SELECT due_at FROM timeout_center.all_timeouts WHERE biz_id = '44'`);
    expect(after.rows[0].due_at.getTime() - before.rows[0].due_at.getTime()).toBeGreaterThan(40 * 60_000);
    expect((await run(reschedule))[0]!.rowCount).toBe(0); // 42's timeout is cancelled: it does not move
    await s.pool.query(`DELETE FROM timeout_center.timeouts WHERE biz_id IN ('42', '43', '44'); DELETE FROM timeout_center.done_timeouts WHERE biz_id IN ('42', '43', '44'); DELETE FROM orders WHERE id IN (42, 43, 44); DELETE FROM order_transitions`);
  });

  it('every sql block of the README runs as written against the schema', async () => {
    // The Citus forms (section 3e) need a Citus cluster: test/integration/citus.test.ts runs them.
    // The roles block creates a login (cluster-wide): test/integration/roles.test.ts runs it with a
    // name of its own, then runs section 3 as that login.
    const blocks = readmeBlocks().filter((b) => b.lang === 'sql' && !b.name?.startsWith('citus-') && b.name !== 'roles');
    expect(blocks.length).toBeGreaterThanOrEqual(4);
    for (const b of blocks) {
      await expect(run(b.text), `README.md:${b.line} (${b.section})`).resolves.toBeDefined();
    }
    // The flow-control example pauses order.unpaid (its CLI block resumes it: run as written by
    // test/integration/flow-control.test.ts); put the kind back for the race below.
    await s.pool.query(`DELETE FROM timeout_center.timeouts; DELETE FROM timeout_center.done_timeouts; DELETE FROM orders; DELETE FROM order_transitions;
      UPDATE timeout_center.kinds SET paused = false, max_running_shards = NULL, rate_limit = NULL, controls_source = 'config'`);
  });

  it('payments at the due instant, written as the README says: no order both closed and paid, no deadlock', async () => {
    const workers = [s.worker('worker-1'), s.worker('worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started')));
    const coordinator = s.coordinator();
    await coordinator.waitForMsg('became leader', 15_000);
    const figures = await paymentRace(s, workers, namedBlock('pay').text, { n: 1000, spreadMs: 2000 });
    report('README payment protocol at the due instant', { ...figures });
    expect(figures.payerErrors).toEqual({});
    expect(figures.workerDeadlocks).toBe(0);
    expect(figures.closedThenPaid).toBe(0);
    expect(figures.paidThenClosed).toBe(0);
    expect(figures.paid + figures.refused).toBe(500);
    const inv = await s.expectInvariants(30_000);
    expect(inv.applied + figures.paid).toBe(1000);
    await s.stopAll();
  }, 120_000);
});

const curlTool = requireTools('curl');
const isCurl = (text: string) => text.trimStart().startsWith('curl ');

describe.skipIf(curlTool.skip)(curlTool.title('README section 3d (curl against a live API)'), () => {
  it('each curl block, run as written against `timeout-center api`, answers what the text says', async () => {
    const exported = readmeBlocks().find((b) => b.lang === 'sh' && /^export TC_API=/.test(b.text));
    expect(exported, 'the export block of section 3d').toBeDefined();
    const token = /TC_TOKEN=(\S+)/.exec(exported!.text)![1]!;
    const port = await freePort();
    const tokens = JSON.stringify([{ name: 'readme', token, kinds: ['*'], verbs: ['*'] }]);
    const api = spawnCli('api', ['api', '-c', s.configPath, '--port', String(port)], s.env({ TC_API_TOKENS: tokens }));
    try {
      await api.waitForMsg('api listening', 60_000);
      const env = { ...process.env, TC_API: `http://127.0.0.1:${port}`, TC_TOKEN: token };
      const answer = async (name: string) => {
        const b = namedBlock(name);
        expect(isCurl(b.text), `${name} is a curl block`).toBe(true);
        const { stdout } = await promisify(execFile)('sh', ['-c', b.text], { env, timeout: 10_000 });
        return JSON.parse(stdout) as Record<string, unknown>;
      };
      expect(await answer('api-schedule')).toMatchObject({ kind: 'order.unpaid', bizId: '42', created: true });
      expect(await answer('api-batch')).toMatchObject({ transaction: 'all-or-nothing', count: 2, created: 2 });
      expect(await answer('api-get')).toMatchObject({ bizId: '42', state: 'pending', attempts: 0 });
      expect(await answer('api-reschedule')).toEqual({ rescheduled: true });
      expect(await answer('api-cancel')).toEqual({ cancelled: true });
      // settle: one of settle's outcomes (src/settle/), never an error.
      const settled = await answer('api-settle');
      expect(settled).not.toHaveProperty('error');
      expect(SETTLE_OUTCOMES).toContain(settled['outcome']);
      const rows = await s.pool.query(
        `SELECT DISTINCT ON (biz_id) biz_id, state FROM timeout_center.all_timeouts WHERE biz_id IN ('42', '43', '44') ORDER BY biz_id, id DESC`,
      );
      expect(rows.rows).toEqual([
        { biz_id: '42', state: 'cancelled' },
        { biz_id: '43', state: 'pending' },
        { biz_id: '44', state: 'pending' },
      ]);
    } finally {
      await api.stop();
    }
  });
});

describe('README shell commands', () => {
  const pkg = JSON.parse(readFileSync(`${ROOT}/package.json`, 'utf8')) as { scripts: Record<string, string> };
  const commands = readmeBlocks()
    .filter((b) => b.lang === 'sh' && !isCurl(b.text)) // the curl blocks run against a live API above
    .flatMap((b) =>
      b.text
        .replace(/\\\n\s*/g, ' ')
        .split('\n')
        .map((l) => l.replace(/\s+#.*$/, '').trim())
        .filter(Boolean)
        .flatMap((l) => l.split('&&').map((c) => ({ command: c.trim(), where: `README.md:${b.line}` }))),
    );

  it('name npm scripts, CLI verbs and flags, and files that exist', async () => {
    // Each verb's --help, read first, four processes at a time.
    const verbs = [
      ...new Set(
        commands
          .map(({ command }) => command.split(/\s+/))
          .map((w) => (w[0] === 'timeout-center' ? w[1] : w[0] === 'npx' && w[1] === 'timeout-center' ? w[2] : undefined))
          .filter((v): v is string => v !== undefined),
      ),
    ];
    const helpOf = new Map<string, string>();
    for (let i = 0; i < verbs.length; i += 4) {
      await Promise.all(
        verbs.slice(i, i + 4).map(async (verb) => {
          const r = await runCli([verb, '--help'], {});
          expect(r.code, `${verb} --help: ${r.stderr}`).toBe(0);
          helpOf.set(verb, r.lines.map((l) => String(l.msg)).join('\n') + r.stderr);
        }),
      );
    }
    for (const { command, where } of commands) {
      const words = command.split(/\s+/);
      const label = `${where}: ${command}`;
      if (words[0] === 'npm') {
        if (words[1] === 'install') continue;
        const script = words[1] === 'run' ? words[2]! : words[1]!;
        expect(pkg.scripts[script], label).toBeDefined();
      } else if ((words[0] === 'npx' && words[1] === 'timeout-center') || words[0] === 'timeout-center') {
        if (words[0] === 'timeout-center') words.unshift('npx');
        const verb = words[2]!;
        expect(helpOf.has(verb), label).toBe(true);
        for (const flag of words.filter((w) => w.startsWith('-'))) expect(helpOf.get(verb), `${label}: ${flag}`).toContain(flag);
      } else if (words[0] === 'npx' && words[1] === 'vitest') {
        expect(existsSync(`${ROOT}/${words[3]}`), label).toBe(true);
      } else if (words[0] === 'source') {
        expect(existsSync(`${ROOT}/${words[1]}`), label).toBe(true);
      } else if (words[0] === 'kubectl') {
        for (const f of words.filter((w) => w.startsWith('deploy/'))) expect(existsSync(`${ROOT}/${f}`), label).toBe(true);
      } else if (words[0] === 'docker') {
        expect(existsSync(`${ROOT}/docker-compose.yml`) || existsSync(`${ROOT}/compose.yaml`) || existsSync(`${ROOT}/docker-compose.yaml`), label).toBe(true);
      } else if (words[0] === 'export') {
        expect(command, label).toMatch(/^export (\w+=\S+\s*)+$/);
      } else {
        expect.unreachable(`${label}: a README command this test does not know how to check`);
      }
    }
  });
});

describe('README section 3c: the operator commands, run as written against a center and three stores', () => {
  const dbs: TestDatabase[] = [];
  const pools: pg.Pool[] = [];
  afterAll(async () => {
    await killAll();
    await Promise.all(pools.map((p) => p.end()));
    await Promise.all(dbs.map((d) => d.drop()));
  });

  it('each command exits as its comment says, with the stores example as the config', async () => {
    const readme = readFileSync(`${ROOT}/README.md`, 'utf8');
    const yaml = /```yaml\n(# stores example[\s\S]*?)```/.exec(readme)![1]!;
    expect(yaml, 'the example sets a Redis key prefix').toMatch(/^redisKeyPrefix: \S+/m);
    // This run's own prefix on the shared test Redis (the README's otherwise as written).
    const dir = mkdtempSync(join(tmpdir(), 'tc-readme-3c-'));
    writeFileSync(join(dir, 'timeout-center.yaml'), yaml.replace(/^redisKeyPrefix: \S+/m, `redisKeyPrefix: ${testKeyPrefix('readme3c')}`));
    const center = await createTestDatabase('readme_3c');
    dbs.push(center);
    const env: Record<string, string> = { PATH: process.env['PATH'] ?? '', DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL };
    for (const i of [0, 1, 2]) {
      const store = await createTestDatabase(`readme_3c_orders_${i}`, { empty: true });
      dbs.push(store);
      const pool = new pg.Pool({ connectionString: store.url, max: 2 });
      pools.push(pool);
      await createOrdersSchema(pool);
      env[`ORDERS_${i}_URL`] = store.url;
    }
    const block = readmeBlocks().find((b) => b.lang === 'sh' && b.section.startsWith('3c.'))!;
    expect(block, 'a sh block in section 3c').toBeDefined();
    const sh = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(process.execPath, [CLI, ...args], { cwd: dir, env, timeout: 60_000 }, (err, stdout, stderr) =>
          resolve({ code: err ? Number((err as { code?: unknown }).code) : 0, stdout, stderr }),
        );
      });
    const ran: string[] = [];
    for (const raw of block.text.split('\n').filter((l) => l.trim())) {
      const command = raw.replace(/\s+#.*$/, '').trim();
      const expected = Number(/#.*\(exit (\d)/.exec(raw)?.[1] ?? 0);
      if (command.startsWith('export ')) {
        for (const [, k, v] of command.slice(7).matchAll(/(\w+)=(\S+)/g)) env[k!] = v!;
        continue;
      }
      const words = command.split(/\s+/);
      expect(words[0], raw).toBe('timeout-center');
      const r = await sh(words.slice(1));
      ran.push(`$ ${command}   -> exit ${r.code}\n${r.stdout}${r.stderr}`);
      expect(r.code, `README.md:${block.line}: ${command}\n${r.stdout}${r.stderr}`).toBe(expected);
      if (words[1] === 'migrate') {
        // Work for the fleet: orders 1..60 due now (20 in each store) and order 42 due in an hour
        // (for the cancel); a `run` closes the due ones, so each store has its reduced scans.
        for (const [i, pool] of pools.entries()) {
          await pool.query(
            `WITH o AS (INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM generate_series(1, 60) g WHERE g % 3 = $1 AND g <> 42 RETURNING id)
             INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', id::text, now() FROM o`,
            [i],
          );
        }
        await pools[0]!.query(`INSERT INTO orders (id, status) VALUES (42, 'unpaid')`);
        await pools[0]!.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', '42', now() + interval '1 hour')`);
        const fleet = spawnCli('run', ['run', '--port', '0', '-c', join(dir, 'timeout-center.yaml')], env);
        const deadline = Date.now() + 90_000;
        for (;;) {
          const left = await Promise.all(
            pools.map(async (p) => (await p.query(`SELECT (SELECT count(*) FROM timeout_center.timeouts WHERE state <> 'pending' OR due_at < now())::int
                + (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int + (CASE WHEN EXISTS (SELECT 1 FROM timeout_center.scans) THEN 0 ELSE 1 END) AS n`)).rows[0].n as number),
          );
          if (left.every((n) => n === 0)) break;
          if (Date.now() > deadline) throw new Error(`the fleet did not close the due orders: ${left.join(', ')} left; ${fleet.stderr}`);
          await new Promise((r) => setTimeout(r, 250));
        }
        expect((await fleet.stop()).code).toBe(0);
      }
    }
    console.log(`README section 3c, as run:\n${ran.join('\n')}`);
    expect(ran.map((r) => r.split('   ->')[0])).toEqual(expect.arrayContaining(['$ timeout-center status', '$ timeout-center migrate']));
    const statusOut = ran.find((r) => r.startsWith('$ timeout-center status'))!;
    expect(statusOut).toMatch(/^Fleet: OK \(the center and 3 stores answer; nothing wrong\)$/m);
    for (const store of ['orders_0', 'orders_1', 'orders_2']) expect(statusOut).toMatch(new RegExp(`^ {2}${store} +0 +0 +- +0 +#\\d+ reduced`, 'm'));
    expect(ran.find((r) => r.startsWith('$ timeout-center cancel'))).toMatch(/cancelled 1 order\.unpaid timeout: 42/);
  }, 240_000);
});
