// README.md's code blocks, run as written (read from README.md, so the documentation cannot drift
// from what is tested):
//   - every ```sql block runs against a fresh database (migrated, the kinds of the example config,
//     an `orders` table), in README order, and the section 3 examples do what the text says;
//   - the section 3 payment races closes at the due instant, with a fleet running: no order is
//     both closed and paid, no deadlock on either side;
//   - every ```sh command names an npm script, a CLI verb and flags, or a file that exists (the
//     commands that start a cluster are exercised by test/docs/npm-start.test.ts and
//     test/deploy/manifests.test.ts).
// Examples are about order 42; other orders run the same text with 42 replaced (readme-blocks.ts).
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { killAll, runCli } from '../helpers/processes.js';
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
    // The Citus forms (section 3d) need a Citus cluster: test/integration/citus.test.ts runs them.
    const blocks = readmeBlocks().filter((b) => b.lang === 'sql' && !b.name?.startsWith('citus-'));
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

describe('README shell commands', () => {
  const pkg = JSON.parse(readFileSync(`${ROOT}/package.json`, 'utf8')) as { scripts: Record<string, string> };
  const commands = readmeBlocks()
    .filter((b) => b.lang === 'sh')
    .flatMap((b) =>
      b.text
        .replace(/\\\n\s*/g, ' ')
        .split('\n')
        .map((l) => l.replace(/\s+#.*$/, '').trim())
        .filter(Boolean)
        .flatMap((l) => l.split('&&').map((c) => ({ command: c.trim(), where: `README.md:${b.line}` }))),
    );

  it('name npm scripts, CLI verbs and flags, and files that exist', async () => {
    const helpOf = new Map<string, string>();
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
        if (!helpOf.has(verb)) {
          const r = await runCli([verb, '--help'], {});
          expect(r.code, `${label}: ${r.stderr}`).toBe(0);
          helpOf.set(verb, r.lines.map((l) => String(l.msg)).join('\n') + r.stderr);
        }
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
