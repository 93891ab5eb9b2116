// The operator verbs across stores (issue 27, docs/scale.md "Acting across stores"), as real
// processes: a center database, two stores (databases of their own) holding order.unpaid by
// `id % 2`, and a third store that is down (order.unshipped), with a real `timeout-center run`.
// With the config, scans / failed / purge read every store and name the store of each row, the
// unreachable one shown as such; retry --kind and cancel act in the store that holds the rows; and
// every action's audit row ends in the center's audit_log naming its store (copied by the verb,
// or by the store's leader when it was left behind), never twice. Issue 31 point 4: `status`
// shows the whole fleet first and names what is wrong (exit 1); a store whose URL variable is
// unset is named by every verb, the others shown or done (exit 1); every verb takes -c.
import { execFile } from 'node:child_process';
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forwardStoreAudit } from '../../src/stores/audit-outbox.js';
import { sql } from '../../src/db/queries.js';
import { schedule } from '../../src/schedule.js';
import { StoreRouter } from '../../src/stores/store-router.js';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { CLI, killAll, spawnCli, runCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';

const KIND = 'order.unpaid';
const STORES = ['store_a', 'store_b'] as const; // id % 2 = 0 -> store_a, 1 -> store_b
const ORDERS = 400; // every 25th is poison: 16 fail, 8 in each store
const LIVE = [1001, 1002, 1003]; // due in an hour, for cancel

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((r) => server.close(r));
  return port;
}

function cli(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'] ?? '', ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

async function waitFor(what: string, test: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('operator verbs across stores', () => {
  let center: TestDatabase;
  let stores: TestDatabase[] = [];
  let centerPool: pg.Pool;
  let pools: pg.Pool[] = [];
  let env: Record<string, string>;
  let runner: CliProcess | undefined;
  let configInput: Parameters<typeof writeConfig>[0];
  const json = async <T>(args: string[], code = 0): Promise<T> => {
    const r = await cli([...args, '--json'], env);
    expect(r.code, r.stderr).toBe(code);
    return JSON.parse(r.stdout) as T;
  };
  const centerAudit = async (action: string) =>
    (
      await centerPool.query<{ actor: string; store: string | null; kind: string | null; target: string | null }>(
        'SELECT actor, store, kind, target FROM timeout_center.audit_log WHERE action = $1 ORDER BY store, id',
        [action],
      )
    ).rows;

  beforeAll(async () => {
    center = await createTestDatabase('ops_center');
    stores = await Promise.all(STORES.map((s) => createTestDatabase(`ops_${s}`, { empty: true })));
    centerPool = new pg.Pool({ connectionString: center.url, max: 3 });
    pools = stores.map((s) => new pg.Pool({ connectionString: s.url, max: 3 }));
    await Promise.all(pools.map((p) => createOrdersSchema(p)));
    const downUrl = `postgres://root@127.0.0.1:${await closedPort()}/gone`;
    configInput = {
      redisKeyPrefix: testKeyPrefix('ops'),
      kinds: {
        [KIND]: {
          store: 'beside',
          shardSize: 100,
          maxAttempts: 1,
          handler: { type: 'sql', sql: CLOSE_SQL, route: { by: 'modulo', databases: [...STORES] } },
        },
        'order.unshipped': { store: 'beside', handler: { type: 'sql', sql: CLOSE_SQL, database: 'store_down' } },
      },
      businessDatabases: { store_a: { url: stores[0]!.url }, store_b: { url: stores[1]!.url }, store_down: { url: downUrl } },
      coordinator: { lockTtlMs: 3000, minTickIntervalMs: 50 },
      // Each store's leader purges its own done timeouts (the last test); late enough that the
      // tests before it still see the burst's done rows.
      retention: { intervalMs: 1000, doneAfterMs: 40_000 },
      worker: { concurrency: 2, leaseMs: 15_000 },
    };
    const configPath = writeConfig(configInput);
    env = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    // migrate prepares the center and both stores, and fails naming the store it cannot reach.
    const migrated = await runCli(['migrate'], env, 60_000);
    expect(migrated.code, migrated.stderr).toBe(1); // done for the others: exit 1
    const summary = migrated.lines.map((l) => String(l.msg)).join('\n');
    expect(summary).toMatch(/^migrate: 1 of 4 databases NOT done$/m);
    expect(summary).toMatch(/^store_down +store +NOT DONE: .*ECONNREFUSED/m);
    expect(summary).toMatch(/^store store_down: .*\. Start it or fix businessDatabases\.store_down, then run migrate again\.$/m);
    for (const [i, pool] of pools.entries()) {
      await pool.query(
        `WITH o AS (INSERT INTO orders (id, status, poison) SELECT g, 'unpaid', g % 25 = 0 FROM generate_series(1, $1::int) g WHERE g % 2 = $2 RETURNING id)
         INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $3, id::text, now() FROM o`,
        [ORDERS, i, KIND],
      );
      await pool.query(
        `WITH o AS (INSERT INTO orders (id, status) SELECT g, 'unpaid' FROM unnest($1::int[]) g WHERE g % 2 = $2 RETURNING id)
         INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $3, id::text, now() + interval '1 hour' FROM o`,
        [LIVE, i, KIND],
      );
    }
    runner = spawnCli('run', ['run', '--port', '0'], env);
    await runner.waitForMsg('worker started');
    await waitFor('both stores drained and reduced', async () => {
      for (const pool of pools) {
        const { rows } = await pool.query(`SELECT
            (SELECT count(*) FROM timeout_center.all_timeouts WHERE state IN ('pending', 'dispatched') AND due_at < now() + interval '1 minute')::int AS open,
            (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int AS scans,
            (SELECT count(*) FROM timeout_center.scans)::int AS all_scans`);
        if (rows[0].open > 0 || rows[0].scans > 0 || rows[0].all_scans === 0) return false;
      }
      return true;
    });
  }, 120_000);

  afterAll(async () => {
    const stopped = await runner?.stop();
    const leaked = await killAll();
    await Promise.all([centerPool, ...pools].map((p) => p?.end()));
    await Promise.all([center, ...stores].map((d) => d?.drop()));
    expect(stopped?.code ?? 0).toBe(0);
    expect(leaked).toEqual([]);
  }, 60_000);

  it('scans: every store, each row with its store; the store that is down shown as unreachable', async () => {
    // store_down does not answer: the others are shown, exit 1 (done in part).
    const doc = await json<{ stores: { store: string; reachable: boolean; error?: string }[]; scans: { store: string; scanId: number }[] }>(['scans'], 1);
    expect(doc.stores.map((s) => [s.store, s.reachable])).toEqual([
      ['center', true],
      ['store_a', true],
      ['store_b', true],
      ['store_down', false],
    ]);
    expect(doc.stores[3]!.error).toMatch(/ECONNREFUSED|connect/);
    expect(new Set(doc.scans.map((s) => s.store))).toEqual(new Set(['store_a', 'store_b']));
    const text = await cli(['scans'], env);
    expect(text.code, text.stderr).toBe(1);
    expect(text.stdout).toMatch(/^STORE\s+SCAN\s+STATE/m);
    expect(text.stdout).toMatch(/^store store_down: UNREACHABLE \(.*\): its scans are not shown/m);
    // One store: as before, no other store read.
    const one = await json<{ stores: { store: string }[]; scans: { store: string }[] }>(['scans', '--store', 'store_b']);
    expect(one.stores.map((s) => s.store)).toEqual(['store_b']);
    expect(one.scans.every((s) => s.store === 'store_b')).toBe(true);
    // The read verbs need no Redis: the config without REDIS_URL is enough.
    const noRedis = await cli(['scans', '--json'], { DATABASE_URL: center.url, TIMEOUT_CENTER_CONFIG: env['TIMEOUT_CENTER_CONFIG']! });
    expect(noRedis.code, noRedis.stderr).toBe(1);
    expect((JSON.parse(noRedis.stdout) as { stores: unknown[] }).stores).toHaveLength(4);
    // Without the config: the center alone, the JSON of old (an array).
    const plain = await cli(['scans', '--json'], { DATABASE_URL: center.url });
    expect(plain.code, plain.stderr).toBe(0);
    expect(JSON.parse(plain.stdout)).toEqual([]);
  });

  it('status: the whole fleet first (the center and every store), what is wrong named with what to do, exit 1', async () => {
    const r = await cli(['status'], env);
    console.log(`status with a store down:\n${r.stdout}`);
    expect(r.code, r.stderr).toBe(1);
    const text = r.stdout;
    expect(text.split('\n')[0]).toBe('Fleet: 1 PROBLEM (exit 1)');
    expect(text).toMatch(
      /^ {2}- store store_down: UNREACHABLE \(.*ECONNREFUSED.*\): its timeouts wait until it answers; the other databases go on\. Start it, or check businessDatabases\.store_down$/m,
    );
    // One row per database: backlog, lag, failed, last scan, leader, live workers.
    expect(text).toMatch(/^ {2}DATABASE +DUE WAITING +IN FLIGHT +OLDEST LAG +FAILED +LAST SCAN +LEADER +LIVE WORKERS$/m);
    for (const store of ['store_a', 'store_b'])
      expect(text).toMatch(new RegExp(`^ {2}${store} +0 +0 +- +8 +#\\d+ reduced, .+ ago +.*\\(epoch \\d+\\) +[1-9]\\d*$`, 'm'));
    expect(text).toMatch(/^ {2}center +0 +0 +- +0 +none yet +.*\(epoch \d+\) +[1-9]\d*$/m);
    expect(text).toMatch(/^ {2}store_down +UNREACHABLE/m);
    expect(text).toMatch(/^ {2}all: 0 due and waiting, 0 in flight, oldest lag -, 16 failed, 1 live workers$/m);
    // The stores' scans (before: "Last scans: none yet", the center's alone).
    expect(text).toMatch(/^Last scans \(every database, newest first; scan ids are per database\):\n {2}STORE +SCAN +STATE/m);
    expect(text).toMatch(/^ {2}store_a +\d+ +reduced /m);
    expect(text).toMatch(/^Failed timeouts: 16 \(store_a order\.unpaid 8, store_b order\.unpaid 8\)/m);

    const doc = await json<{
      ok: boolean;
      problems: { store: string; topic: string }[];
      fleet: { store: string; reachable: boolean; failed?: number; lastScan: { scanId: number } | null; leader: { epoch: number } | null }[];
      stores: { store: string; reachable: boolean }[];
      scans: { store: string }[];
      totals: { failed: number };
    }>(['status'], 1);
    expect(doc.ok).toBe(false);
    expect(doc.problems.map((p) => [p.store, p.topic])).toEqual([['store_down', 'unreachable']]);
    expect(doc.fleet.map((f) => [f.store, f.reachable])).toEqual([
      ['center', true],
      ['store_a', true],
      ['store_b', true],
      ['store_down', false],
    ]);
    expect(doc.stores.map((f) => f.store)).toEqual(['store_a', 'store_b', 'store_down']);
    for (const f of doc.fleet.slice(1, 3)) {
      expect(f.lastScan, f.store).not.toBeNull();
      expect(f.leader?.epoch, f.store).toBeGreaterThanOrEqual(1);
      expect(f.failed, f.store).toBe(8);
    }
    expect(doc.totals.failed).toBe(16);
    expect(new Set(doc.scans.map((x) => x.store))).toEqual(new Set(['store_a', 'store_b']));
  });

  it('-c works for every verb here as TIMEOUT_CENTER_CONFIG does', async () => {
    const noVar = { DATABASE_URL: center.url, REDIS_URL: TEST_REDIS_URL };
    for (const args of [['failed'], ['scans'], ['status'], ['purge', '--dry-run'], ['retry', '--kind', KIND, '--dry-run']]) {
      const r = await cli([...args, '-c', env['TIMEOUT_CENTER_CONFIG']!], noVar);
      // store_down does not answer: done for the others, exit 1, each output naming the stores.
      expect(r.code, `${args.join(' ')} -c: ${r.stderr}`).toBe(args[0] === 'retry' ? 0 : 1);
      expect(r.stdout, args.join(' ')).toMatch(/store_a/);
    }
  });

  it('a store whose URL variable is unset: status, failed and migrate name the variable and go on with the rest, exit 1', async () => {
    const unsetPath = writeConfig({
      ...configInput,
      businessDatabases: { ...configInput.businessDatabases, store_b: { urlEnv: 'TC_TEST_STORE_B_URL' } },
    });
    const unsetEnv = { ...env, TIMEOUT_CENTER_CONFIG: unsetPath };
    const status = await cli(['status'], unsetEnv);
    console.log(`status with a URL variable unset:\n${status.stdout}`);
    expect(status.code, status.stderr).toBe(1);
    expect(status.stdout).toMatch(
      /^ {2}- store store_b: NOT SET: TC_TEST_STORE_B_URL is not set: it should hold the URL of store store_b \(businessDatabases\.store_b\.urlEnv\); set it and run again$/m,
    );
    expect(status.stdout).toMatch(/^ {2}store_b +NOT SET/m);
    expect(status.stdout).toMatch(/^ {2}store_a +0 +0 +- +8 /m); // the others are shown
    const statusJson = JSON.parse((await cli(['status', '--json'], unsetEnv)).stdout) as {
      problems: { store: string; topic: string }[];
      fleet: { store: string; unsetVariable?: string }[];
    };
    expect(statusJson.problems.map((p) => [p.store, p.topic])).toEqual([
      ['store_b', 'unset'],
      ['store_down', 'unreachable'],
    ]);
    expect(statusJson.fleet.find((f) => f.store === 'store_b')?.unsetVariable).toBe('TC_TEST_STORE_B_URL');

    const failed = await cli(['failed'], unsetEnv);
    expect(failed.code, failed.stderr).toBe(1);
    expect(failed.stdout).toMatch(/^store_a +\d+ +order\.unpaid /m);
    expect(failed.stdout).toMatch(
      /^store store_b: NOT SET \(TC_TEST_STORE_B_URL is not set: .*\): its failed timeouts are not shown; the other stores are shown\.$/m,
    );
    const one = await cli(['failed', '--store', 'store_b'], unsetEnv);
    expect(one.code).toBe(2);
    expect(one.stderr).toMatch(/--store store_b: TC_TEST_STORE_B_URL is not set/);

    const migrated = await cli(['migrate', '--no-logs'], unsetEnv);
    console.log(`migrate with a URL variable unset and a store down:\n${migrated.stdout}`);
    expect(migrated.code, migrated.stderr).toBe(1);
    expect(migrated.stdout).toMatch(/^migrate: 2 of 4 databases NOT done$/m);
    expect(migrated.stdout).toMatch(/^center +center +none: already up to date +\d+ /m);
    expect(migrated.stdout).toMatch(/^store_a +store +none: already up to date +\d+ /m);
    expect(migrated.stdout).toMatch(/^store_b +store +NOT SET: TC_TEST_STORE_B_URL is not set/m);
    expect(migrated.stdout).toMatch(/^store_down +store +NOT DONE: /m);
    expect(migrated.stdout).toMatch(
      /^store store_b: TC_TEST_STORE_B_URL is not set\. Set it to the URL of store_b \(businessDatabases\.store_b\.urlEnv\), then run migrate again\.$/m,
    );
  });

  it('metrics carry the store: leaders, store probes and the worker counters per store', async () => {
    const port = Number((await runner!.waitForMsg('serving /metrics, /healthz, /readyz', 30_000))['port']);
    let text = '';
    const value = (name: string, labels: string) => Number(new RegExp(`^${name}\\{[^}]*${labels}[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
    // The store probe answers within its first round.
    await waitFor('tc_store_up for every store', async () => {
      text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return !Number.isNaN(value('tc_store_up', 'store="store_down"')) && !Number.isNaN(value('tc_store_up', 'store="store_a"'));
    });
    for (const store of ['center', 'store_a', 'store_b']) expect(value('tc_leader', `store="${store}"`), `tc_leader ${store}`).toBe(1);
    expect(value('tc_store_up', 'store="store_a"')).toBe(1);
    expect(value('tc_store_up', 'store="store_down"')).toBe(0);
    for (const store of ['store_a', 'store_b']) {
      expect(value('tc_timeouts_total', `store="${store}",kind="${KIND}",outcome="applied"`), `applied in ${store}`).toBeGreaterThan(0);
    }
  });

  it('shards: a scan id needs its store; failed: the failed timeouts of every store', async () => {
    const many = await cli(['shards', '1'], env);
    expect(many.code).toBe(2);
    expect(many.stderr).toMatch(/scan ids are per store: pass --store <name> \(center, store_a, store_b, store_down\)/);
    // A store that does not answer: nothing shown, exit 3, naming the store and where its URL comes from.
    const down = await cli(['shards', '1', '--store', 'store_down'], env);
    expect(down.code).toBe(3);
    expect(down.stderr).toMatch(
      /store store_down does not answer: cannot reach PostgreSQL at .*ECONNREFUSED.*\. Start it, or check businessDatabases\.store_down/,
    );
    const shards = await json<{ store: string; scanId: number }[]>(['shards', '1', '--store', 'store_a']);
    expect(shards.length).toBeGreaterThan(0);
    expect(shards.every((s) => s.store === 'store_a' && s.scanId === 1)).toBe(true);

    const failed = await json<{ total: number; timeouts: { store: string; bizId: string }[] }>(['failed'], 1);
    expect(failed.total).toBe(16);
    for (const t of failed.timeouts) expect(t.store).toBe(Number(t.bizId) % 2 === 0 ? 'store_a' : 'store_b');
  });

  it('retry --kind acts in each store of the kind, audited in the center with the store; ids need their store', async () => {
    const byId = await cli(['retry', '--id', '1'], env);
    expect(byId.code).toBe(2);
    expect(byId.stderr).toMatch(/ids are per store: with --id, --scan or --shard, pass --store <name>/);
    const dry = await json<{ stores: { store: string; retried: number }[] }>(['retry', '--kind', KIND, '--dry-run']);
    expect(dry.stores.map((s) => [s.store, s.retried])).toEqual([
      ['store_a', 8],
      ['store_b', 8],
    ]);
    expect(await centerAudit('retry')).toEqual([]);

    const done = await json<{ stores: { store: string; retried: number }[] }>(['retry', '--kind', KIND, '--actor', 'ops-test']);
    expect(done.stores.map((s) => [s.store, s.retried])).toEqual([
      ['store_a', 8],
      ['store_b', 8],
    ]);
    expect((await centerAudit('retry')).map((r) => [r.store, r.actor, r.kind])).toEqual([
      ['store_a', 'ops-test', KIND],
      ['store_b', 'ops-test', KIND],
    ]);
    // Copied, not kept twice: the stores' outboxes are empty of it.
    for (const pool of pools) {
      expect((await pool.query(`SELECT count(*)::int AS n FROM timeout_center.audit_log WHERE actor = 'ops-test'`)).rows[0].n).toBe(0);
    }
    // By id, in its store: the retried poison fails again (the runner claims it), then retry it by id.
    await waitFor('the retried poison failed again', async () => (await json<{ total: number }>(['failed'], 1)).total === 16);
    const one = await json<{ retried: number; ids: number[] }[] | { stores: { store: string; retried: number }[] }>([
      'retry',
      '--store',
      'store_b',
      '--kind',
      KIND,
      '--id',
      String((await pools[1]!.query(`SELECT id FROM timeout_center.timeouts WHERE state = 'failed' ORDER BY id LIMIT 1`)).rows[0].id),
    ]);
    expect(one).toMatchObject({ stores: [{ store: 'store_b', retried: 1 }] });
  });

  it('cancel goes to the store the route picks for each id; a store that is down is named, exit 1', async () => {
    const r = await json<{ cancelled: string[]; notLive: string[]; stores: Record<string, string[]> }>([
      'cancel',
      KIND,
      ...LIVE.map(String),
      '--actor',
      'ops-test',
    ]);
    expect(r.cancelled.sort()).toEqual(LIVE.map(String));
    expect(r.stores).toEqual({ store_b: ['1001', '1003'], store_a: ['1002'] });
    for (const id of LIVE) {
      const { rows } = await pools[id % 2]!.query(`SELECT state FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2`, [KIND, String(id)]);
      expect(rows.map((x) => x.state)).toEqual(['cancelled']);
    }
    expect((await centerAudit('cancel')).map((a) => [a.store, a.target])).toEqual([
      ['store_a', '1002'],
      ['store_b', '1001'],
      ['store_b', '1003'],
    ]);
    // Again: nothing live any more, nothing cancelled: exit 1, naming why.
    const again = await cli(['cancel', KIND, ...LIVE.map(String)], env);
    expect(again.code).toBe(1);
    expect(again.stdout).toMatch(/^cancelled 0 order\.unpaid timeouts\nnot cancelled \(already cancelled\): 1001, 1003, 1002$/m);
    // The only store it needs does not answer: nothing done, exit 3 (unavailable), naming it.
    const down = await cli(['cancel', 'order.unshipped', '7'], env);
    expect(down.code).toBe(3);
    expect(down.stderr).toMatch(/nothing done: no database of this call answered \(store_down: .*ECONNREFUSED.*\)/);
    const unroutable = await cli(['cancel', KIND, 'abc'], env);
    expect(unroutable.code).toBe(1);
    expect(unroutable.stdout).toMatch(/cannot place these ids: modulo and range take integer ids\): abc/);
  });

  it("an audit row left in a store reaches the center through the store's leader, once", async () => {
    // As if the verb's copy had failed (the center down at that moment): the row waits in the store.
    await pools[0]!.query(`INSERT INTO timeout_center.audit_log (actor, action, kind, target) VALUES ('left-behind', 'cancel', $1, '42')`, [KIND]);
    await waitFor("the store's leader copied it", async () => (await centerAudit('cancel')).some((a) => a.actor === 'left-behind'), 30_000);
    expect((await pools[0]!.query(`SELECT count(*)::int AS n FROM timeout_center.audit_log WHERE actor = 'left-behind'`)).rows[0].n).toBe(0);

    // A crash between the copy and the delete: the row is copied again later, and recorded once.
    const { rows } = await pools[1]!.query(
      `INSERT INTO timeout_center.audit_log (actor, action, kind, target) VALUES ('crashed-copy', 'cancel', $1, '43') RETURNING id, at, actor, action, kind, target, details`,
      [KIND],
    );
    await centerPool.query(sql('stores/copy_store_audit', { store: 'store_b', rows: JSON.stringify(rows) }));
    await forwardStoreAudit(pools[1]!, centerPool, 'store_b');
    const copies = (await centerAudit('cancel')).filter((a) => a.actor === 'crashed-copy');
    expect(copies).toEqual([{ actor: 'crashed-copy', store: 'store_b', kind: KIND, target: '43' }]);
  });

  it('schedule(), reschedule() and cancel() through the StoreRouter go to the store the rule picks; the wrong database refuses', async () => {
    const router = new StoreRouter(centerPool, { store_a: pools[0]!, store_b: pools[1]! });
    const stateIn = async (i: number, id: number) =>
      (await pools[i]!.query(`SELECT state FROM timeout_center.timeouts WHERE kind = $1 AND biz_id = $2`, [KIND, String(id)])).rows.map((r) => r.state);
    for (const id of [2001, 2002]) {
      await pools[id % 2]!.query(`INSERT INTO orders (id, status) VALUES ($1, 'unpaid')`, [id]);
      const t = await router.schedule({ kind: KIND, bizId: id, delayMs: 3_600_000 });
      expect(t.created).toBe(true);
      expect(await stateIn(id % 2, id)).toEqual(['pending']);
      expect(await stateIn(1 - (id % 2), id)).toEqual([]);
    }
    expect(await router.reschedule(KIND, 2001, { delayMs: 7_200_000 })).toBe(true);
    expect(await router.cancel(KIND, 2002)).toBe(true);
    expect(await stateIn(0, 2002)).toEqual(['cancelled']);
    // Called on the wrong database, schedule() is refused naming the right store, and writes nothing.
    await expect(schedule(pools[0]!, { kind: KIND, bizId: 2003, delayMs: 1000 })).rejects.toThrow(/belongs in store store_b, not in store store_a/);
    expect(await stateIn(0, 2003)).toEqual([]);
    await expect(router.schedule({ kind: KIND, bizId: 'abc', delayMs: 1000 })).rejects.toThrow(/cannot place biz_id abc/);
    await expect(router.schedule({ kind: 'order.unshipped', bizId: 5, delayMs: 1000 })).rejects.toThrow(
      /belongs in store store_down, and no database was given/,
    );
  });

  it('purge: each store, audited; the store that is down named, exit 1', async () => {
    const dry = await cli(['purge', '--dry-run'], env);
    expect(dry.code).toBe(1);
    expect(dry.stdout).toMatch(/^store store_a: would delete \d+ done\/cancelled timeouts/m);
    expect(dry.stdout).toMatch(/^store store_down: UNREACHABLE/m);
    const real = await json<{ stores: { store: string; deleted?: { timeouts: number }; unreachable?: string }[] }>([
      'purge',
      '--store',
      'store_a',
      '--done-after',
      '0s',
      '--actor',
      'ops-test',
    ]);
    expect(real.stores).toMatchObject([{ store: 'store_a', deleted: { timeouts: expect.any(Number) } }]);
    expect(real.stores[0]!.deleted!.timeouts).toBeGreaterThan(0);
    expect((await centerAudit('purge')).map((a) => [a.store, a.actor])).toEqual([['store_a', 'ops-test']]);
  });

  it("each store's leader runs retention in its own database", async () => {
    // store_b's done rows (store_a's were purged by the operator above) go once they are 40 s old.
    await waitFor(
      "store_b's leader purged its done timeouts",
      async () => (await pools[1]!.query(`SELECT count(*)::int AS n FROM timeout_center.done_timeouts`)).rows[0].n === 0,
      90_000,
    );
    // The log line follows the purge's commit through the process's stdout: waited for, not read
    // at once (CI once read the lines a moment before it arrived).
    await waitFor(
      "the runner's log names store_b's purge",
      async () => runner!.lines.some((l) => l.msg === 'retention purged old rows' && l['store'] === 'store_b'),
      10_000,
    );
  }, 120_000);
});
