// PostgreSQL failover the way production runs it (issue 35): a primary and a streaming-replication
// standby on free ports (pg_basebackup -R), and every process given the multi-host connection
// string `postgres://h1,h2/db?target_session_attrs=read-write&connect_timeout=3`. (a) The pool
// alone: each new connection tries the hosts in order (a dead one, a standby, the primary) and
// keeps the first that qualifies; a session whose server turns read-only meets 25006 and is
// dropped, never reused. (b) A switchover under a running engine: the primary stopped, the
// standby promoted, the old primary back as a standby of the new one; the processes find the new
// primary through the same string, /readyz names it, and I1-I4 hold. (c) The same after the
// primary turned read-only under the engine's open sessions (25006 on their writes).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FencedError, fencedTransaction } from '../../src/coordinator/fence.js';
import { createPool } from '../../src/db/pool.js';
import { sql } from '../../src/db/queries.js';
import { reachedHost } from '../../src/db/reached-hosts.js';
import { CLOSE_SQL, writeConfig } from '../helpers/orders.js';
import { CLI, killAll, runCli, type CliProcess } from '../helpers/processes.js';
import { TEST_REDIS_URL } from '../helpers/services.js';
import { freePort, startPostgres, startStandby, stopAllServers, type PostgresServer } from '../helpers/servers.js';
import { linesMatching, report, Scenario, sleep, waitUntil } from './harness.js';

const run = promisify(execFile);
const N = 6000;
const silent = pino({ level: 'silent' });
let a: PostgresServer;
let b: PostgresServer;
let s: Scenario | undefined;

const multi = (servers: PostgresServer[], database = 'postgres') =>
  `postgres://postgres@${servers.map((x) => `127.0.0.1:${x.port}`).join(',')}/${database}?target_session_attrs=read-write&connect_timeout=3`;

/** Waits until `standby` has replayed everything `primary` has written (a clean switchover). */
async function caughtUp(primary: PostgresServer, standby: PostgresServer): Promise<void> {
  const lsn = async (server: PostgresServer, q: string) => {
    const p = createPool({ connectionString: server.url(), max: 1, applicationName: 'lsn', logger: silent });
    try {
      return (await p.query<{ l: string }>(q)).rows[0]!.l;
    } finally {
      await p.end();
    }
  };
  const target = await lsn(primary, 'SELECT pg_current_wal_lsn()::text AS l');
  await waitUntil('the standby caught up', async () => {
    const p = createPool({ connectionString: standby.url(), max: 1, applicationName: 'lsn', logger: silent });
    try {
      return (await p.query<{ ok: boolean }>(`SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok`, [target])).rows[0]!.ok;
    } finally {
      await p.end();
    }
  });
}

async function readyz(p: CliProcess): Promise<{ postgres: { host?: string; target?: string; pools: { pool: string; host?: string }[] } }> {
  const port = (await p.waitForMsg('serving /metrics, /healthz, /readyz', 20_000)).port;
  const res = await fetch(`http://127.0.0.1:${String(port)}/readyz`);
  return (await res.json()) as { postgres: { host?: string; target?: string; pools: { pool: string; host?: string }[] } };
}

beforeAll(async () => {
  a = await startPostgres();
  b = await startStandby(a);
});

afterAll(async () => {
  await killAll();
  await s?.close();
  await stopAllServers();
});

describe('PostgreSQL failover through a multi-host connection string', () => {
  it('each new connection keeps the first host that qualifies; a session that meets 25006 is dropped, never reused', async () => {
    const dead = await freePort();
    // Order: nothing listening, the standby, the primary.
    const url = `postgres://postgres@127.0.0.1:${dead},127.0.0.1:${b.port},127.0.0.1:${a.port}/postgres?target_session_attrs=read-write&connect_timeout=2`;
    const pool = createPool({ connectionString: url, max: 2, applicationName: 'failover unit', logger: silent });
    try {
      expect((await pool.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]!.r).toBe(false);
      expect(reachedHost(pool)).toMatchObject({
        host: `127.0.0.1:${a.port}`,
        target: `127.0.0.1:${dead},127.0.0.1:${b.port},127.0.0.1:${a.port}/postgres (read-write)`,
      });
      // With any, the standby (the first host that answers) is kept.
      const any = createPool({ connectionString: url.replace('read-write', 'any'), max: 1, applicationName: 'failover unit', logger: silent });
      expect((await any.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]!.r).toBe(true);
      await any.end();

      // The primary turns read-only under an open session: its next write fails with 25006, the
      // session is ended and the pool does not hand it out again.
      await pool.query('CREATE TABLE IF NOT EXISTS failover_probe (x int)');
      // pool.query (the coordinator's tick): its session, opened while the primary is read-write
      const warnings: string[] = [];
      const watched = createPool({
        connectionString: url,
        max: 1,
        applicationName: 'failover unit',
        logger: pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) }),
      });
      await watched.query('SELECT 1');
      const client = await pool.connect();
      const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const admin = createPool({ connectionString: a.url(), max: 1, applicationName: 'admin', logger: silent });
      await admin.query('ALTER SYSTEM SET default_transaction_read_only = on');
      await admin.query('SELECT pg_reload_conf()');
      await sleep(300);
      const err = await client.query('INSERT INTO failover_probe VALUES (1)').then(
        () => undefined,
        (e: unknown) => e as { code?: string },
      );
      expect(err?.code).toBe('25006');
      client.release();
      await expect(watched.query('INSERT INTO failover_probe VALUES (2)')).rejects.toMatchObject({ code: '25006' });
      expect(warnings.join(''), 'pool.query met 25006: its session is dropped, and said so').toMatch(/turned standby under this connection/);
      await watched.end();
      // A new connection: the primary no longer qualifies (read-only), the standby neither.
      await expect(pool.query('SELECT 1')).rejects.toThrow(/no host of .* accepted a read-write session: .*ECONNREFUSED.*hot standby.*read-only/);
      await admin.query('ALTER SYSTEM RESET default_transaction_read_only');
      await admin.query('SELECT pg_reload_conf()');
      await admin.end();
      await sleep(300);
      const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      expect(rows[0]!.pid, 'the session that met 25006 was not reused').not.toBe(pid);
      await pool.query('DROP TABLE failover_probe');
    } finally {
      await pool.end();
    }
  });

  it('switchover under a running engine: primary stopped, standby promoted, old primary back as its standby; I1-I4 hold', async () => {
    s = await Scenario.create('pg-failover-switch', { databaseUrl: multi([a, b]) });
    const c = s.coordinator('coordinator', { args: ['--port', '0'] });
    await c.waitForMsg('became leader', 20_000);
    const workers = [s.worker('worker-1', { args: ['--port', '0'] }), s.worker('worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    expect((await readyz(workers[0]!)).postgres.host).toBe(`127.0.0.1:${a.port}`);
    await s.seed(N, { spreadMs: 6000 });
    await waitUntil('the drain under way', async () => (await s!.count(`SELECT count(*) AS n FROM order_transitions`)) >= N * 0.2, 30_000, 20);

    const at = new Date();
    await a.pgCtl('-w', '-m', 'fast', 'stop'); // a clean switchover: the standby has every commit
    await b.promote();
    const answeringAt = new Date();
    await a.followAs(b);

    const inv = await s.expectInvariants(60_000);
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
    const w1 = await readyz(workers[0]!);
    expect(w1.postgres.host, 'the worker reaches the new primary').toBe(`127.0.0.1:${b.port}`);
    expect((await readyz(c)).postgres.host).toBe(`127.0.0.1:${b.port}`);
    expect(await a.inRecovery(), 'the old primary follows the new one').toBe(true);
    // `status` says where the same string leads now.
    // (status exits 1 when it names a problem, e.g. a lag past the SLA; its JSON is printed either way)
    const { stdout } = await run(process.execPath, [CLI, 'status', '--json'], { env: { ...process.env, DATABASE_URL: multi([a, b]) } }).catch(
      (err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }),
    );
    expect((JSON.parse(stdout) as { postgres: unknown }).postgres).toEqual({
      host: `127.0.0.1:${b.port}`,
      target: `127.0.0.1:${a.port},127.0.0.1:${b.port}/postgres (read-write)`,
    });
    const { rows } = await s.pool.query<{ gap: number; resume: number }>(
      `WITH c AS (SELECT at, lag(at) OVER (ORDER BY at) AS prev FROM order_transitions WHERE to_status = 'closed')
       SELECT (SELECT max(extract(epoch FROM at - greatest(prev, $1)) * 1000) FROM c WHERE at >= $1)::float8 AS gap,
              (SELECT extract(epoch FROM min(at) - $2) * 1000 FROM c WHERE at >= $2)::float8 AS resume`,
      [at, answeringAt],
    );
    const figures = {
      timeouts: N,
      applied: inv.applied,
      switchoverMs: answeringAt.getTime() - at.getTime(),
      longestGapMs: Math.round(rows[0]!.gap),
      closesResumeAfterPromotedMs: Math.round(rows[0]!.resume),
      connectionLostEvents: [c, ...workers].reduce((n, p) => n + linesMatching(p, /PostgreSQL connection lost/).length, 0),
      wallMs: s.elapsedMs(),
    };
    await s.stopAll();
    report('pg switchover (fast stop, promote, old primary follows)', figures);
    await s.close();
    s = undefined;
  });

  it('the primary turns read-only under the engine (25006 on open sessions), then the standby is promoted: the sessions are dropped and the engine drains on the new primary', async () => {
    // After the previous test b is the primary and a its standby. A database of its own.
    const admin = createPool({ connectionString: b.url(), max: 1, applicationName: 'admin', logger: silent });
    await admin.query('CREATE DATABASE readonly_case');
    s = await Scenario.create('pg-failover-readonly', { databaseUrl: multi([b, a], 'readonly_case') });
    const c = s.coordinator('coordinator');
    await c.waitForMsg('became leader', 20_000);
    const workers = [s.worker('worker-1'), s.worker('worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    await s.seed(N, { spreadMs: 6000 });
    await waitUntil('the drain under way', async () => (await s!.count(`SELECT count(*) AS n FROM order_transitions`)) >= N * 0.2, 30_000, 20);

    const at = new Date();
    await admin.query('ALTER SYSTEM SET default_transaction_read_only = on');
    await admin.query('SELECT pg_reload_conf()');
    await sleep(1500); // the engine's sessions meet 25006 meanwhile
    await admin.query('SET default_transaction_read_only = off');
    await admin.query('ALTER SYSTEM RESET default_transaction_read_only');
    await admin.end();
    await caughtUp(b, a);
    await b.pgCtl('-w', '-m', 'fast', 'stop');
    await a.promote();
    const answeringAt = new Date();
    await b.followAs(a);

    const inv = await s.expectInvariants(60_000);
    expect(inv.applied).toBe(N);
    for (const p of [c, ...workers]) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
    const dropped = [c, ...workers].reduce((n, p) => n + linesMatching(p, /turned standby under this connection/).length, 0);
    expect(dropped, 'sessions that met 25006 were dropped').toBeGreaterThan(0);
    await s.stopAll();
    report('pg read-only primary then promotion', {
      timeouts: N,
      applied: inv.applied,
      readOnlyToPromotedMs: answeringAt.getTime() - at.getTime(),
      sessionsDroppedOn25006: dropped,
      wallMs: s.elapsedMs(),
    });
    await s.close();
    s = undefined;
  });
  it('a fencing epoch taken on the old primary and lost with it (asynchronous standby) is never handed out again: the next leader gets a greater one', async () => {
    // After the previous test a is the primary and b its asynchronous standby.
    const admin = createPool({ connectionString: a.url(), max: 1, applicationName: 'admin', logger: silent });
    await admin.query('CREATE DATABASE epoch_case');
    await admin.end();
    const url = multi([a, b], 'epoch_case');
    const config = writeConfig({ kinds: { k: { handler: { type: 'sql', sql: CLOSE_SQL } } } });
    const migrated = await runCli(['migrate', '--config', config], { DATABASE_URL: url, REDIS_URL: TEST_REDIS_URL });
    expect(migrated.code, migrated.stderr).toBe(0);
    const pool = createPool({ connectionString: url, max: 2, applicationName: 'epoch test', logger: silent });
    try {
      const bump = async (who: string) => (await pool.query<{ epoch: number }>(sql('coordinator/bump_epoch', { coordinatorId: who }))).rows[0]!.epoch;
      const epochA = await bump('leader-a');
      await caughtUp(a, b);
      // The standby stops receiving (as if it lagged): leader B's epoch commits on the primary only.
      const standby = createPool({ connectionString: b.url(), max: 1, applicationName: 'admin', logger: silent });
      await standby.query(`ALTER SYSTEM SET primary_conninfo = ''`);
      await standby.query('SELECT pg_reload_conf()');
      await waitUntil(
        'the standby stopped streaming',
        async () => (await standby.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_wal_receiver')).rows[0]!.n === 0,
      );
      await standby.end();
      await sleep(100);
      const epochB = await bump('leader-b');
      expect(epochB).toBeGreaterThan(epochA);
      // The primary's machine dies; the standby, without B's epoch, is promoted.
      await a.kill();
      await b.promote();
      const after = (await pool.query<{ epoch: number; holder: string }>('SELECT epoch, holder FROM timeout_center.coordinator_lease')).rows[0]!;
      expect(after, 'the lost transaction: the lease went back to leader A').toEqual({ epoch: epochA, holder: 'leader-a' });
      // Leader C takes over after the failover. Were its epoch B's (epoch + 1 from the row it
      // finds), B and C would both pass the fence: two leaders writing at once.
      const epochC = await bump('leader-c');
      expect(epochC, 'the epoch never goes back to one already handed out').toBeGreaterThan(epochB);
      await expect(fencedTransaction(pool, epochB, async () => 'written')).rejects.toThrow(FencedError);
      await expect(fencedTransaction(pool, epochC, async () => 'written')).resolves.toBe('written');
      report('fencing epoch across a failover that lost a commit', { epochA, epochB, epochC });
    } finally {
      await pool.end();
    }
  });
  it('a failover to an asynchronous standby that lost the last closes: the close and its record vanish together, the engine closes those orders again, once', async () => {
    // After the previous test b is the primary (a is dead): a new standby c of b.
    const c = await startStandby(b);
    const admin = createPool({ connectionString: b.url(), max: 1, applicationName: 'admin', logger: silent });
    await admin.query('CREATE DATABASE lost_case');
    await admin.end();
    s = await Scenario.create('pg-failover-lost', { databaseUrl: multi([b, c], 'lost_case') });
    const coordinator = s.coordinator('coordinator');
    await coordinator.waitForMsg('became leader', 20_000);
    const workers = [s.worker('worker-1'), s.worker('worker-2')];
    await Promise.all(workers.map((w) => w.waitForMsg('worker started', 20_000)));
    await s.seed(N, { spreadMs: 6000 });
    const closedNow = () => s!.count(`SELECT count(*) AS n FROM order_transitions WHERE to_status = 'closed'`);
    await waitUntil('the drain under way', async () => (await closedNow()) >= N * 0.2, 30_000, 20);
    await caughtUp(b, c);
    // c stops receiving: what b commits from now on is lost in the failover.
    const standby = createPool({ connectionString: c.url(), max: 1, applicationName: 'admin', logger: silent });
    await standby.query(`ALTER SYSTEM SET primary_conninfo = ''`);
    await standby.query('SELECT pg_reload_conf()');
    await waitUntil(
      'c stopped streaming',
      async () => (await standby.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_wal_receiver')).rows[0]!.n === 0,
    );
    await standby.end();
    const closedAtDetach = await closedNow();
    await waitUntil('more closes on b alone', async () => (await closedNow()) >= closedAtDetach + N * 0.15, 30_000, 20);
    const closedOnB = await closedNow();
    await b.kill();
    await c.promote();
    const onC = createPool({ connectionString: c.url('lost_case'), max: 1, applicationName: 'admin', logger: silent });
    const closedOnC = Number((await onC.query<{ n: number }>(`SELECT count(*)::int AS n FROM order_transitions WHERE to_status = 'closed'`)).rows[0]!.n);
    await onC.end();
    expect(closedOnC, 'closes committed on b after c stopped receiving are gone').toBeLessThan(closedOnB);

    const inv = await s.expectInvariants(60_000);
    expect(inv.applied, 'every timeout applied once in the surviving history').toBe(N);
    for (const p of [coordinator, ...workers]) expect(p.alive, `${p.name} survived (stderr: ${p.stderr.slice(-500)})`).toBe(true);
    await s.stopAll();
    report('pg failover to an asynchronous standby that lost closes', {
      timeouts: N,
      applied: inv.applied,
      closedOnOldPrimary: closedOnB,
      closedOnPromotedStandby: closedOnC,
      lostAndRedone: closedOnB - closedOnC,
      wallMs: s.elapsedMs(),
    });
    await s.close();
    s = undefined;
  });
});
