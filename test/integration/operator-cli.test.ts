// The operator verbs as real processes against a real database that a real coordinator + worker
// (`timeout-center run`) has worked on: status, scans, shards, failed, retry, cancel, with --json
// and as tables; bad arguments exit 2 with one clear line and change nothing; every verb takes
// -c/--config the same way, and exits by the one table of docs/reference/cli.md "Exit codes"
// (issue 31 point 4); migrate ends with a summary per database.
import { execFile } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSE_SQL, createOrdersSchema, writeConfig } from '../helpers/orders.js';
import { CLI, killAll, runCli, spawnCli, type CliProcess } from '../helpers/processes.js';
import { createTestDatabase, testKeyPrefix, TEST_REDIS_URL, type TestDatabase } from '../helpers/services.js';
import { requireTools, toolCommand } from '../helpers/system-tools.js';

const ORDERS = 2000; // ids 1..2000; every 100th is poison (its close raises), so 20 fail
const POISON = ORDERS / 100;

describe('operator CLI against a real database', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let env: Record<string, string>;
  let dbEnv: Record<string, string>;
  let runner: CliProcess | undefined;
  let configPath: string;

  const out = (r: { stdout: string }) => r.stdout.trimEnd();
  /** Runs a verb with only DATABASE_URL in its environment (no config file, no Redis URL). */
  const cli = (args: string[]) => runRaw(args, dbEnv);
  const json = async <T>(args: string[], code = 0): Promise<T> => {
    const r = await cli([...args, '--json']);
    expect(r.code, r.stderr).toBe(code);
    return JSON.parse(r.stdout) as T;
  };
  /** Everything an operator verb could change, to prove a rejected call changed nothing. */
  const snapshot = async () =>
    (await pool.query(`SELECT md5(string_agg(t::text, ',' ORDER BY id)) AS h FROM timeout_center.all_timeouts t`)).rows[0].h as string;

  beforeAll(async () => {
    db = await createTestDatabase('cli');
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    await createOrdersSchema(pool);
    configPath = writeConfig({
      redisKeyPrefix: testKeyPrefix('cli'),
      kinds: {
        'order.unpaid': { shardSize: 250, maxAttempts: 1, handler: { type: 'sql', sql: CLOSE_SQL } },
        'order.unshipped': { handler: { type: 'sql', sql: CLOSE_SQL } },
      },
      coordinator: { lockTtlMs: 3000 },
      worker: { concurrency: 2, leaseMs: 15_000 },
    });
    env = { DATABASE_URL: db.url, REDIS_URL: TEST_REDIS_URL, TIMEOUT_CENTER_CONFIG: configPath };
    // The read verbs need nothing but DATABASE_URL: no config file, no Redis.
    dbEnv = { DATABASE_URL: db.url };
    const migrated = await runCli(['migrate'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
    await pool.query(`INSERT INTO orders (id, status, poison) SELECT g, 'unpaid', g % 100 = 0 FROM generate_series(1, $1::int) g`, [ORDERS]);
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unpaid', g::text, now() + interval '500 ms' FROM generate_series(1, $1::int) g`,
      [ORDERS],
    );
    // Live ones for status / cancel: due in an hour.
    await pool.query(
      `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT 'order.unshipped', (9000 + g)::text, now() + interval '1 hour' FROM generate_series(1, 5) g`,
    );
    runner = spawnCli('run', ['run'], env);
    await runner.waitForMsg('worker started');
    // Drained: every due timeout final, every scan reduced.
    const deadline = Date.now() + 60_000;
    for (;;) {
      const { rows } = await pool.query(`SELECT
          (SELECT count(*) FROM timeout_center.all_timeouts WHERE kind = 'order.unpaid' AND state NOT IN ('done', 'failed'))::int AS open,
          (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int AS scans`);
      if (rows[0].open === 0 && rows[0].scans === 0) break;
      if (Date.now() > deadline) throw new Error(`pipeline did not drain: ${JSON.stringify(rows[0])}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });

  afterAll(async () => {
    const stopped = await runner?.stop();
    const leaked = await killAll();
    await pool?.end();
    await db?.drop();
    expect(stopped?.code ?? 0).toBe(0);
    expect(leaked, 'processes still running after the test').toEqual([]);
  });

  it('status: backlog, leader and epoch, live workers, failed count, last scans (table and --json)', async () => {
    const s = await json<{
      backlog: unknown[];
      totals: { pendingDue: number; inFlight: number; oldestLagSeconds: number | null; failed: number };
      leader: { holder: string; epoch: number } | null;
      liveWorkers: { workerId: string; pid: number }[];
      failed: Record<string, number>;
      scans: { scanId: number; state: string }[];
    }>(['status']);
    expect(s.totals).toMatchObject({ pendingDue: 0, inFlight: 0, failed: POISON });
    expect(s.failed).toEqual({ 'order.unpaid': POISON });
    expect(s.leader?.epoch).toBeGreaterThanOrEqual(1);
    expect(s.leader?.holder).toContain(String(runner!.pid));
    expect(s.liveWorkers.map((w) => w.pid)).toEqual([runner!.pid]);
    expect(s.scans.length).toBeGreaterThan(0);
    expect(s.scans.every((x) => x.state === 'reduced')).toBe(true);

    const r = await cli(['status']);
    expect(r.code, r.stderr).toBe(0);
    const text = out(r);
    expect(text).toMatch(/^Backlog: 0 due and waiting, 0 in flight/m);
    expect(text).toMatch(new RegExp(`^Leader: \\S*${runner!.pid} \\(epoch \\d+`, 'm'));
    expect(text).toMatch(/^Live workers: 1$/m);
    expect(text).toMatch(new RegExp(`^Failed timeouts: ${POISON} \\(order.unpaid ${POISON}\\)`, 'm'));
    expect(text).toMatch(/SCAN +STATE +CLAIMED +SHARDS +DONE +SKIPPED +FAILED +RETRIED/);
    console.log(`status output:\n${text}`);

    // Nothing due is waiting (the order.unshipped rows are due in an hour).
    expect(s.backlog).toEqual([]);
  });

  it('scans and shards: newest first, totals match the rows; shards of one scan', async () => {
    const scans = await json<{ scanId: number; claimed: number; done: number; failed: number; shards: number }[]>(['scans', '--limit', '100']);
    expect(scans.length).toBeGreaterThan(0);
    expect(scans.map((s) => s.scanId)).toEqual([...scans.map((s) => s.scanId)].sort((a, b) => b - a));
    expect(scans.reduce((a, s) => a + s.claimed, 0)).toBe(ORDERS);
    expect(scans.reduce((a, s) => a + s.failed, 0)).toBe(POISON);
    const limited = await json<unknown[]>(['scans', '--limit', '1']);
    expect(limited).toHaveLength(1);

    const first = scans.find((s) => s.failed > 0)!;
    const shards = await json<{ shardId: number; scanId: number; kind: string; state: string; done: number; failed: number; errorSample: string | null }[]>([
      'shards',
      String(first.scanId),
    ]);
    expect(shards).toHaveLength(first.shards);
    expect(shards.every((s) => s.scanId === first.scanId && s.state === 'done' && s.kind === 'order.unpaid')).toBe(true);
    expect(shards.reduce((a, s) => a + s.failed, 0)).toBe(first.failed);
    expect(shards.find((s) => s.failed > 0)!.errorSample).toMatch(/poison row/);

    const table = out(await cli(['shards', String(first.scanId)]));
    expect(table.split('\n')[0]).toMatch(/^SHARD +KIND +SIZE +STATE +ATTEMPTS +OWNER +DONE +SKIPPED +FAILED +RETRIED +DURATION +ERROR$/);
    expect(table.split('\n')).toHaveLength(first.shards + 1);
    const scanTable = out(await cli(['scans']));
    expect(scanTable.split('\n')[1]).toMatch(new RegExp(`^ *${scans[0]!.scanId} +reduced `));
  });

  it('failed: lists the failed timeouts with their error, filtered by kind and scan', async () => {
    const f = await json<{ total: number; timeouts: { timeoutId: number; kind: string; bizId: string; lastError: string; scanId: number; shardId: number }[] }>(
      ['failed', '--kind', 'order.unpaid'],
    );
    expect(f.total).toBe(POISON);
    expect(f.timeouts).toHaveLength(POISON);
    expect(f.timeouts.every((t) => Number(t.bizId) % 100 === 0 && /poison row/.test(t.lastError))).toBe(true);
    const none = await json<{ total: number }>(['failed', '--kind', 'order.unshipped']);
    expect(none.total).toBe(0);
    const limited = await json<{ total: number; timeouts: unknown[] }>(['failed', '--limit', '3']);
    expect(limited).toMatchObject({ total: POISON });
    expect(limited.timeouts).toHaveLength(3);
    const scanId = f.timeouts[0]!.scanId;
    const byScan = await json<{ total: number; timeouts: { scanId: number }[] }>(['failed', '--scan', String(scanId)]);
    expect(byScan.total).toBeGreaterThan(0);
    expect(byScan.timeouts.every((t) => t.scanId === scanId)).toBe(true);
    const text = out(await cli(['failed', '--limit', '2']));
    expect(text).toMatch(/^TIMEOUT +KIND +BIZ ID +DUE +ATTEMPTS +FAILED AT +SHARD +SCAN +ERROR$/m);
    expect(text).toMatch(new RegExp(`showing 2 of ${POISON}`));
  });

  it('bad arguments: one clear line on stderr, exit 2, nothing changed', async () => {
    const before = await snapshot();
    const cases: [string[], RegExp][] = [
      [['retry'], /retry needs a selector: --id/],
      [['retry', '--id', 'abc'], /--id must be a positive integer id, got "abc"/],
      [['retry', '--id', '5,x'], /--id must be a positive integer id, got "x"/],
      [['retry', '--id', '-3'], /--id must be a positive integer id/],
      [['retry', '--kind', 'order.nope'], /unknown kind "order.nope"; known kinds: order.unpaid, order.unshipped/],
      [['retry', '--scan', '1.5'], /--scan must be a positive integer id, got "1.5"/],
      [['retry', '--shard', '0'], /--shard must be a positive integer id, got "0"/],
      [['cancel', 'order.nope', '9001'], /unknown kind "order.nope"/],
      [['cancel', 'order.unshipped', 'x'.repeat(201)], /bizId must be 1 to 200 characters/],
      [['cancel', 'order.unshipped'], /missing required argument 'bizId'/],
      [['failed', '--kind', 'order.nope'], /unknown kind "order.nope"/],
      [['failed', '--limit', 'ten'], /--limit must be an integer from 1 to 100000, got "ten"/],
      [['scans', '--limit', '0'], /--limit must be an integer from 1 to 100000/],
      [['scans', '--state', 'done'], /--state must be one of mapping, mapped, reduced/],
      [['shards', 'abc'], /scanId must be a positive integer id, got "abc"/],
      [['shards', '987654'], /scan 987654 does not exist/],
      [['purge', '--done-after', '7 weeks'], /--done-after must be a duration such as 7d/],
      [['purge', '--batch-size', '0'], /--batch-size must be an integer/],
    ];
    for (const [args, message] of cases) {
      const r = await cli(args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr, args.join(' ')).toMatch(message);
      expect(r.stderr.trim().split('\n').length, `${args.join(' ')}: one line, got ${r.stderr}`).toBeLessThanOrEqual(2);
    }
    // No DATABASE_URL, or a database nobody answers on.
    const noUrl = await runRaw(['status'], {});
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toMatch(/DATABASE_URL is not set/);
    // A database nobody answers on: nothing done, exit 3 (unavailable), saying what to check.
    const down = await runRaw(['status'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' });
    expect(down.code).toBe(3);
    expect(down.stderr).toMatch(
      /cannot reach PostgreSQL: center: postgres:\/\/postgres@127.0.0.1:1\/none: .*ECONNREFUSED.*Is the server running and DATABASE_URL right\?/,
    );
    expect(await snapshot()).toBe(before);
  });

  it('retry: by id (dry run first), by shard, by scan, by kind; the retried timeouts run again', async () => {
    const failed = (await json<{ timeouts: { timeoutId: number; shardId: number; scanId: number }[] }>(['failed', '--limit', '100'])).timeouts;
    const [a, b] = failed.map((t) => t.timeoutId).sort((x, y) => x - y);

    const dry = await json<{ matched: number; retried: number; dryRun: boolean }>(['retry', '--id', `${a},${b}`, '--dry-run']);
    expect(dry).toMatchObject({ matched: 2, retried: 2, dryRun: true });
    expect((await json<{ total: number }>(['failed'])).total).toBe(POISON);

    // The poison stays poison: make two orders closable so the retry can succeed.
    const ids = [a!, b!];
    await pool.query(`UPDATE orders SET poison = false WHERE id IN (SELECT biz_id::bigint FROM timeout_center.timeouts WHERE id = ANY($1))`, [ids]);
    // Timeout 1 is done, not failed: not all asked for was retried, exit 1.
    const byId = await json<{ retried: number; ids: number[]; notFailed: number[] }>(['retry', '--id', String(a), '--id', String(b), '--id', '1'], 1);
    expect(byId.retried).toBe(2);
    expect(byId.ids).toEqual(ids);
    expect(byId.notFailed).toEqual([1]); // timeout 1 is done, not failed
    const { rows: reset } = await pool.query(`SELECT state, attempts, finished_at, shard_id FROM timeout_center.all_timeouts WHERE id = ANY($1)`, [ids]);
    // Pending (or already claimed again by the running coordinator), attempts back to 0.
    for (const r of reset) expect(['pending', 'dispatched', 'done']).toContain(r.state);

    await waitFor(async () => {
      const { rows } = await pool.query(
        `SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE id = ANY($1) AND state = 'done' AND result = 'applied'`,
        [ids],
      );
      return rows[0].n === 2;
    }, 'retried timeouts applied');
    const { rows: closed } = await pool.query(
      `SELECT count(*)::int AS n FROM orders WHERE status = 'closed' AND id IN (SELECT biz_id::bigint FROM timeout_center.all_timeouts WHERE id = ANY($1))`,
      [ids],
    );
    expect(closed[0].n).toBe(2);

    // By shard: the failed timeouts of one shard (they fail again: still poison, maxAttempts 1).
    const rest = (await json<{ timeouts: { timeoutId: number; shardId: number; scanId: number }[] }>(['failed', '--limit', '100'])).timeouts;
    expect(rest).toHaveLength(POISON - 2);
    const shard = rest[0]!.shardId;
    const inShard = rest.filter((t) => t.shardId === shard).length;
    const byShard = await json<{ retried: number }>(['retry', '--shard', String(shard)]);
    expect(byShard.retried).toBe(inShard);
    await waitFor(async () => (await json<{ total: number }>(['failed'])).total === POISON - 2, 'shard retry failed again');

    // By scan + kind (narrowing), then by kind alone.
    const again = (await json<{ timeouts: { scanId: number }[] }>(['failed', '--limit', '100'])).timeouts;
    const scan = again[0]!.scanId;
    const inScan = again.filter((t) => t.scanId === scan).length;
    const byScan = await json<{ retried: number }>(['retry', '--scan', String(scan), '--kind', 'order.unpaid']);
    expect(byScan.retried).toBe(inScan);
    await waitFor(async () => (await json<{ total: number }>(['failed'])).total === POISON - 2, 'scan retry failed again');
    const byKind = await cli(['retry', '--kind', 'order.unpaid']);
    expect(byKind.code, byKind.stderr).toBe(0);
    expect(out(byKind)).toBe(`retried ${POISON - 2} failed timeouts`);
    await waitFor(async () => (await json<{ total: number }>(['failed'])).total === POISON - 2, 'kind retry failed again');

    // Nothing matches: says so, exit 1 (acted on nothing), nothing changed.
    const none = await cli(['retry', '--kind', 'order.unshipped']);
    expect(none.code).toBe(1);
    expect(out(none)).toMatch(/no failed timeouts match \(nothing changed\)/);

    // Never a double effect: each order closed at most once.
    const { rows: doubled } = await pool.query(`SELECT count(*)::int AS n FROM (SELECT order_id FROM order_transitions GROUP BY 1 HAVING count(*) > 1) x`);
    expect(doubled[0].n).toBe(0);
  });

  it('retry leaves a failed timeout alone when its object has a live timeout again', async () => {
    const f = (await json<{ timeouts: { timeoutId: number; bizId: string }[] }>(['failed', '--limit', '1'])).timeouts[0]!;
    // The business scheduled a new timeout for the same order.
    await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) VALUES ('order.unpaid', $1, now() + interval '1 hour')`, [f.bizId]);
    const r = await json<{ matched: number; retried: number; left: number }>(['retry', '--id', String(f.timeoutId)], 1);
    expect(r).toMatchObject({ matched: 1, retried: 0, left: 1 });
    const { rows } = await pool.query(`SELECT state FROM timeout_center.all_timeouts WHERE id = $1`, [f.timeoutId]);
    expect(rows[0].state).toBe('failed');
    await pool.query(`DELETE FROM timeout_center.timeouts WHERE biz_id = $1 AND state = 'pending'`, [f.bizId]);
  });

  it('cancel: cancels live timeouts through cancel(), reports the ones with nothing live', async () => {
    // 424242 has no live timeout: not all asked for was cancelled, exit 1.
    const r = await cli(['cancel', 'order.unshipped', '9001', '9002', '9002', '424242']);
    expect(r.code, r.stderr).toBe(1);
    expect(out(r)).toBe('cancelled 2 order.unshipped timeouts: 9001, 9002\nnot cancelled (no timeout of this kind: never scheduled, or purged): 424242');
    const { rows } = await pool.query(
      `SELECT biz_id, state, finished_at IS NOT NULL AS finished FROM timeout_center.all_timeouts WHERE kind = 'order.unshipped' ORDER BY biz_id`,
    );
    expect(rows.map((x) => `${x.biz_id}:${x.state}:${x.finished}`)).toEqual([
      '9001:cancelled:true',
      '9002:cancelled:true',
      '9003:pending:false',
      '9004:pending:false',
      '9005:pending:false',
    ]);
    // Again: nothing live any more: cancelled nothing, exit 1 (a script must not take it for done).
    const again = await json<{ cancelled: string[]; notLive: string[] }>(['cancel', 'order.unshipped', '9001'], 1);
    expect(again).toEqual({ kind: 'order.unshipped', cancelled: [], notLive: ['9001'], notLiveStates: { '9001': 'cancelled' } });
    const againText = await cli(['cancel', 'order.unshipped', '9001']);
    expect(againText.code).toBe(1);
    expect(out(againText)).toBe('cancelled 0 order.unshipped timeouts\nnot cancelled (already cancelled): 9001');
  });

  it('retry and cancel write audit rows like the console, with their actor', async () => {
    await pool.query(`DELETE FROM timeout_center.audit_log WHERE action IN ('retry', 'cancel')`);
    const cancelled = await cli(['cancel', 'order.unshipped', '9003', '--actor', 'alice']);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    const failedId = (await json<{ timeouts: { timeoutId: number }[] }>(['failed', '--limit', '1'])).timeouts[0]!.timeoutId;
    const dry = await cli(['retry', '--id', String(failedId), '--dry-run', '--actor', 'bob']);
    expect(dry.code, dry.stderr).toBe(0);
    const retried = await cli(['retry', '--id', String(failedId), '--actor', 'bob']);
    expect(retried.code, retried.stderr).toBe(0);
    const { rows } = await pool.query<{ actor: string; action: string; kind: string | null; target: string | null }>(
      `SELECT actor, action, kind, target FROM timeout_center.audit_log WHERE action IN ('retry', 'cancel') ORDER BY id`,
    );
    // One row each: the dry run changed nothing and is not audited.
    expect(rows).toEqual([
      { actor: 'alice', action: 'cancel', kind: 'order.unshipped', target: '9003' },
      { actor: 'bob', action: 'retry', kind: null, target: `ids ${failedId}` },
    ]);
  });

  it('every verb takes -c/--config and TIMEOUT_CENTER_CONFIG, reads it, and its --help ends with the exit codes', async () => {
    const help = await runRaw(['--help'], dbEnv);
    expect(help.code, help.stderr).toBe(0);
    const commands = help.stdout.slice(help.stdout.indexOf('Commands:'));
    const verbs = [...commands.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((v) => v !== 'help');
    expect(verbs).toEqual(expect.arrayContaining(['migrate', 'run', 'status', 'scans', 'shards', 'failed', 'retry', 'cancel', 'purge', 'pause', 'limit']));
    const lacking: string[] = [];
    await inBatches(verbs, async (verb) => {
      const r = await runRaw([verb, '--help'], dbEnv);
      if (r.code !== 0) lacking.push(`${verb} --help: exit ${r.code} ${r.stderr}`);
      if (!/-c, --config <file> .*\(env:\s+TIMEOUT_CENTER_CONFIG\)/s.test(r.stdout)) lacking.push(`${verb}: no -c, --config (env TIMEOUT_CENTER_CONFIG)`);
      if (!/Exit codes \(the same for every verb\):\n {2}0 .*\n[\s\S]* {2}1 [\s\S]* {2}2 [\s\S]* {2}3 [\s\S]* {2}4 /.test(r.stdout))
        lacking.push(`${verb}: no exit code table`);
    });
    expect(lacking).toEqual([]);
    // Each reads it, as the flag and as the variable: a file that is not there is bad input (exit
    // 2) naming the file, before anything runs (the arguments each verb needs besides).
    const args: Record<string, string[]> = {
      shards: ['1'],
      retry: ['--kind', 'order.unpaid'],
      cancel: ['order.unpaid', '1'],
      pause: ['order.unpaid'],
      resume: ['order.unpaid'],
      limit: ['order.unpaid', '--rate', '5'],
      purge: ['--dry-run'],
    };
    const before = await snapshot();
    const ignored: string[] = [];
    const forms = [
      ['-c', ['-c', '/nonexistent/tc.yaml'], dbEnv],
      ['TIMEOUT_CENTER_CONFIG', [], { ...dbEnv, TIMEOUT_CENTER_CONFIG: '/nonexistent/tc.yaml' }],
    ] as const;
    // Every verb with -c; the variable (the same Option, whose help names it) on a few.
    await inBatches(
      verbs.flatMap((verb) => forms.filter((f) => f[0] === '-c' || ['status', 'failed', 'run'].includes(verb)).map((form) => [verb, form] as const)),
      async ([verb, [how, extra, env_]]) => {
        const r = await runRaw([verb, ...(args[verb] ?? []), ...extra], env_);
        if (r.code !== 2 || !/nonexistent\/tc\.yaml:\n {2}- file not found/.test(r.stderr))
          ignored.push(`${verb} (${how}): exit ${r.code}, ${r.stderr.trim()}`);
      },
    );
    expect(ignored).toEqual([]);
    expect(await snapshot()).toBe(before);
    // And with the file there, the read verbs work from it (the config names no store: the center).
    for (const verb of ['failed', 'scans', 'status']) {
      const r = await runRaw([verb, '-c', configPath], dbEnv);
      expect(r.code, `${verb} -c: ${r.stderr}`).toBe(0);
    }
  }, 300_000); // some 40 processes, four at a time

  it('exit codes, one table for every verb: 0 done, 1 in part or nothing, 2 bad input, 3 unavailable', async () => {
    const fresh = await createTestDatabase('cli_unmigrated', { empty: true });
    try {
      const scan = (await json<{ scanId: number }[]>(['scans', '--limit', '1']))[0]!.scanId;
      const cases: [string[], number, Record<string, string>?][] = [
        [['status'], 0],
        [['scans'], 0],
        [['shards', String(scan)], 0],
        [['pause', 'order.unshipped'], 0],
        [['resume', 'order.unshipped'], 0], // a batch after pause (four at a time)
        [['failed'], 0],
        [['purge', '--dry-run'], 0],
        [['migrate'], 0, env],
        [['retry', '--kind', 'order.unshipped'], 1], // no failed timeout of that kind: nothing retried
        [['retry', '--id', '1'], 1], // timeout 1 is done, not failed
        [['cancel', 'order.unshipped', '424242'], 1], // never scheduled: nothing cancelled
        [['limit', 'order.nope', '--rate', '5'], 2],
        [['scans', '--bogus'], 2],
        [['status'], 3, { DATABASE_URL: fresh.url }], // schema missing: run migrate
        [['failed'], 3, { DATABASE_URL: fresh.url }],
        [['cancel', 'order.unshipped', '1'], 3, { DATABASE_URL: fresh.url }],
        [['pause', 'order.unshipped'], 3, { DATABASE_URL: fresh.url }],
      ];
      const got: string[] = [];
      const wrong: string[] = [];
      await inBatches(cases, async ([args, code, env_]) => {
        const r = await runRaw(args, env_ ?? dbEnv);
        got.push(`${args.join(' ')} -> ${r.code}`);
        if (r.code !== code) wrong.push(`${args.join(' ')}: exit ${r.code}, expected ${code}: ${r.stdout}${r.stderr}`);
        if (code >= 2 && r.stderr.trim() === '') wrong.push(`${args.join(' ')}: nothing on stderr`);
        if (code === 3 && !/schema is missing.*run `timeout-center migrate`/.test(r.stderr)) wrong.push(`${args.join(' ')}: ${r.stderr}`);
      });
      console.log(`exit codes:\n${got.join('\n')}`);
      expect(wrong).toEqual([]);
    } finally {
      await fresh.drop();
    }
  }, 300_000);

  it('migrate ends with a summary per database; JSON logs only off a terminal, or with --logs', async () => {
    // Off a terminal (a deploy job's log): the JSON lines, then the summary.
    const piped = await runRaw(['migrate'], env);
    expect(piped.code, piped.stderr).toBe(0);
    const lines = piped.stdout.trimEnd().split('\n');
    expect(lines.filter((l) => l.startsWith('{')).map((l) => (JSON.parse(l) as { msg: string }).msg)).toContain('database already up to date');
    const summary = lines.slice(lines.findIndex((l) => l.startsWith('migrate: ')));
    expect(summary[0]).toBe('migrate: done, 1 database');
    expect(summary.join('\n')).toMatch(/^DATABASE +ROLE +MIGRATIONS +VERSION +RUNS CODE +URL$/m);
    expect(summary.join('\n')).toMatch(/^center +center +none: already up to date +\d+ +postgres:\/\//m);
    expect(summary.join('\n')).toMatch(/^Kinds registered: order\.unpaid, order\.unshipped$/m);
    expect(summary.some((l) => l.startsWith('{'))).toBe(false);
    // --no-logs: the summary alone; --json: the summary as one document.
    const quiet = await runRaw(['migrate', '--no-logs'], env);
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stdout).not.toMatch(/^\{/m);
    expect(quiet.stdout).toMatch(/^migrate: done, 1 database$/m);
    const doc = JSON.parse((await runRaw(['migrate', '--json'], env)).stdout) as {
      ok: boolean;
      databases: { database: string; version: number; applied: string[] }[];
    };
    expect(doc.ok).toBe(true);
    expect(doc.databases).toEqual([expect.objectContaining({ database: 'center', applied: [], version: expect.any(Number) })]);
  });

  it('migrate on a terminal: the summary, no JSON lines (run under a pseudo-terminal)', async (ctx) => {
    const needs = requireTools('script');
    ctx.skip(needs.skip, needs.reason);
    // A database migrated by this run: the summary names what it applied.
    const fresh = await createTestDatabase('cli_tty', { empty: true });
    try {
      const shell = `${process.execPath} ${CLI} migrate --schema-only`;
      const r = await new Promise<{ code: number; stdout: string }>((resolve) => {
        execFile(
          toolCommand('script')[0],
          ['-qec', shell, '/dev/null'],
          { env: { PATH: process.env['PATH'] ?? '', DATABASE_URL: fresh.url, TERM: 'dumb' }, timeout: 60_000 },
          (err, stdout) => resolve({ code: err ? Number((err as { code?: unknown }).code) : 0, stdout: stdout.replace(/\r/g, '') }),
        );
      });
      console.log(`migrate on a terminal:\n${r.stdout}`);
      expect(r.code).toBe(0);
      expect(r.stdout).not.toMatch(/"level":/);
      expect(r.stdout).toMatch(/^migrate: done, 1 database$/m);
      expect(r.stdout).toMatch(/^center +center +applied \d+: 0001_init … \d{4}_\w+ +\d+ /m);
    } finally {
      await fresh.drop();
    }
  });
});

/** Runs the CLI with exactly `env` (plus PATH), returning raw stdout: tables and pretty JSON. */
function runRaw(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'] ?? '', ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** fn over items, four processes at a time. */
async function inBatches<T>(items: readonly T[], fn: (item: T) => Promise<void>, size = 4): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

async function waitFor(test: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
