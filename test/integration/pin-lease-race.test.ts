// A re-run's pin (pin.sql) that commits after its lease ran out. A shard re-run after its worker
// died first pins the rows it will hold (pending -> dispatched, with the shard), in a statement of
// its own. The statement checked the lease when it began; one that finished seconds later (while
// a failover promoted the standby: CI met it in pg-auto-failover.test.ts) let the lease run out
// meanwhile, and the next run of the shard took
// it, pinned nothing (the rows were locked), claimed nothing and finished the shard. The pin then
// committed: its rows stayed dispatched to a finished shard, never closed (10,000 of 20,000 in
// that run). Here the test plays the slow run: it leases the shard, pins in a transaction it holds
// open past the lease (the statements the worker runs: isolate.ts pinRows; on the code before,
// pin.sql alone, and 20 of 20 rows were stranded), while a real worker takes the delivery; then a
// coordinator drains the rest. And rows stranded the old way: the leader's gauge and alert
// (stranded.sql), and the two statements docs/operations.md "Stranded timeouts" and the CHANGELOG
// give: the query that finds them and the one that returns them to pending.
import pg from 'pg';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../../src/db/queries.js';
import { RedisStreamsChannel } from '../../src/transport/redis-streams.js';
import { collectWarnings } from '../../src/operations/warnings.js';
import { pinRows } from '../../src/worker/isolate.js';
import { KIND, Scenario, sleep, waitUntil } from '../faults/harness.js';
import { killAll, runCli } from '../helpers/processes.js';

const scenarios: Scenario[] = [];

afterEach(async () => {
  await killAll();
  for (const s of scenarios.splice(0)) await s.close();
});

/** The query the CHANGELOG gives: rows dispatched to a finished shard, which no run will apply. */
const STRANDED = `SELECT count(*) AS n FROM timeout_center.timeouts t JOIN timeout_center.shards sh ON sh.id = t.shard_id
  WHERE t.state = 'dispatched' AND sh.state IN ('done', 'failed')`;

/** The statement the CHANGELOG gives: stranded rows back to pending, claimed by the next scan. */
const REPAIR = `UPDATE timeout_center.timeouts t SET state = 'pending'
  FROM timeout_center.shards sh
 WHERE sh.id = t.shard_id AND t.state = 'dispatched' AND sh.state IN ('done', 'failed')`;

type Pin = (client: pg.Client, pin: { shardId: number; leaseToken: string }) => Promise<number>;

/**
 * 20 orders due and a shard whose first run began its claim and died (a suspect re-run pins). The
 * slow run leases it (attempt 2, a 300 ms lease) and pins with `pin` in a transaction it holds open
 * past the lease while a real worker takes the shard's delivery; then it commits.
 */
async function raceThePin(label: string, pin: Pin): Promise<Scenario> {
  // debug: the worker says it dropped the delivery (the shard's row locked) at debug level
  const s = await Scenario.create(label, { worker: { concurrency: 1 }, kind: { maxAttempts: 5 }, logLevel: 'debug' });
  scenarios.push(s);
  await s.seed(20);
  const { rows: scan } = await s.pool.query<{ id: string }>(
    "INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', now(), 'mapped') RETURNING id",
  );
  const { rows: shard } = await s.pool.query<{ id: string }>(
    `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state, owner, lease_token, attempts, claim_attempt,
                                        lease_expires_at, started_at, published_at, publish_count)
     VALUES ($1, $2, 0, 20, 100, 'running', 'dead-worker', gen_random_uuid(), 1, 1, now() - interval '1 second', now(), now(), 1) RETURNING id`,
    [scan[0]!.id, KIND],
  );
  const shardId = Number(shard[0]!.id);
  const slow = new pg.Client({ connectionString: s.databaseUrl });
  await slow.connect();
  const channel = new RedisStreamsChannel({ connection: { mode: 'single', url: s.redisUrl }, keyPrefix: s.prefix, logger: pino({ level: 'silent' }) });
  try {
    const { rows: lease } = await slow.query<{ lease_token: string; suspect: boolean; attempts: number }>(
      sql('worker/take_lease', { shardId, workerId: 'slow-worker', leaseMs: 300 }),
    );
    expect(lease[0], 'the slow run leased the shard as a suspect re-run').toMatchObject({ attempts: 2, suspect: true });
    await slow.query('BEGIN');
    expect(await pin(slow, { shardId, leaseToken: lease[0]!.lease_token })).toBe(20);
    await sleep(500); // its lease runs out

    const worker = s.worker('worker-1');
    await worker.waitForMsg('worker started');
    await channel.init([KIND]);
    await channel.publish([{ shardId, scanId: Number(scan[0]!.id), kind: KIND }]);
    await waitUntil(
      'the worker handled the delivery',
      () => worker.lines.some((l) => /dropped duplicate shard delivery|shard runs again|shard split/.test(String(l.msg))),
      10_000,
    ).catch(() => {});
    await sleep(300);
    await slow.query('COMMIT');
    return s;
  } finally {
    await slow.end().catch(() => {});
    await channel.close().catch(() => {});
  }
}

describe('a re-run whose pin commits after its lease ran out', () => {
  it('leaves no row dispatched to a finished shard: every order closes', async () => {
    const s = await raceThePin('pin-lease-race', (client, p) => pinRows(client, { ...p, kind: KIND, claimLimit: 100, bucket: null }));
    expect(await s.count(STRANDED), 'rows dispatched to a shard that is finished (no run will ever apply them)').toBe(0);
    // A coordinator republishes the shard once the slow run's lease is found dead; every order closes.
    s.coordinator('coordinator');
    expect(await s.expectInvariants(30_000)).toMatchObject({ applied: 20, closed: 20, failed: 0 });
  }, 90_000);

  it("stranded by a release before the fix (pin.sql alone): the leader's gauge and alert, status and the console's warnings name them, the documented query finds them, its statement returns them, a running coordinator closes them once", async () => {
    const s = await raceThePin('pin-stranded', async (client, p) => {
      const { rows } = await client.query<{ pinned: number }>(sql('worker/pin', { ...p, kind: KIND, claimLimit: 100 }));
      return rows[0]!.pinned;
    });
    expect(await s.count(STRANDED), 'the release before the fix strands the pinned rows').toBe(20);
    // The leader sees them: the gauge and the alert, with what to do.
    const coordinator = s.coordinator('coordinator', { args: ['--port', '0'] });
    const port = Number((await coordinator.waitForMsg('serving /metrics, /healthz, /readyz', 20_000))['port']);
    const alert = await coordinator.waitForMsg(/^ALERT timeouts_stranded: /, 20_000);
    expect(String(alert.msg)).toContain(`20 timeouts in the center's database (${KIND}: 20) are dispatched to a finished shard`);
    expect(String(alert.msg)).toContain('docs/operations.md "Stranded timeouts"');
    const gauge = async () => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return /^tc_timeouts_stranded\{[^}]*kind="order\.unpaid"[^}]*\} (\d+)/m.exec(text)?.[1];
    };
    expect(await gauge()).toBe('20');
    // status names them and exits 1; the console's warnings (collectWarnings) name them too.
    const status = await runCli(['status', '--config', s.configPath], s.env());
    expect(status.code, status.stderr).toBe(1);
    expect(status.lines.map((l) => String(l.msg)).join('\n')).toContain(`20 ${KIND} timeouts are dispatched to a finished shard: no run will apply them`);
    const { warnings } = await collectWarnings(s.pool, { lagSlaSeconds: 60 });
    expect(warnings.filter((w) => w.topic === 'stranded')).toEqual([
      expect.objectContaining({ severity: 'critical', message: expect.stringContaining(`${KIND}: 20 timeouts are dispatched to a finished shard`) }),
    ]);
    // The repair under a coordinator that has ticked since (its claim floors above the rows).
    await s.pool.query(REPAIR);
    expect(await s.count(STRANDED)).toBe(0);
    expect(await s.expectInvariants(30_000)).toMatchObject({ applied: 20, closed: 20, failed: 0 });
    await waitUntil('the gauge cleared at the next lag check', async () => (await gauge()) === undefined, 10_000);
  }, 90_000);
});
