// PostgreSQL failover under a real HA manager (issue 35): pg_auto_failover's monitor and two data
// nodes (test/helpers/pg-auto-failover.ts), the center's database on them, every process given
// the formation's multi-host URL (target_session_attrs=read-write). Under the 50,000 burst of
// ha-burst.ts (two coordinators, two workers), with payers paying orders from the due instant on,
// the primary's machine dies (its keeper and PostgreSQL SIGKILLed); the monitor promotes the
// standby; the engine finds it through the same URL. Ends with I1-I4, history = business truth
// (every payment acknowledged to a payer is there and was never closed; an order is closed iff
// exactly one of its timeouts was applied), and the gap in closes after the new primary accepted
// writes (goal: under 5 s).
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { TEST_REDIS_URL } from '../helpers/services.js';
import { killAll } from '../helpers/processes.js';
import { startFormation, type Formation } from '../helpers/pg-auto-failover.js';
import { stopAllServers } from '../helpers/servers.js';
import { requireTools } from '../helpers/system-tools.js';
import { BURST, midDrain, startBurst, type Burst } from './ha-burst.js';
import { sleep } from './harness.js';

const tools = requireTools('pg-auto-failover');
const PAYERS = 6;
let formation: Formation | undefined;
let burst: Burst | undefined;

afterAll(async () => {
  await killAll();
  await burst?.s.close();
  await stopAllServers();
});

describe.skipIf(tools.skip)(tools.title('PostgreSQL failover by pg_auto_failover'), () => {
  beforeAll(async () => {
    formation = await startFormation('center');
  }, 240_000);

  it("the center's primary dies under a 50,000 burst with payers at the due instant; the monitor promotes the standby; closes resume through the multi-host URL", async () => {
    const f = formation!;
    const url = f.url('center');
    const before = await f.primary();
    const standby = f.nodes.find((n) => n.name !== before.name)!;
    const dueInMs = 3000;
    burst = await startBurst('pgaf-center', { REDIS_URL: TEST_REDIS_URL }, { databaseUrl: url, dueInMs });
    const b = burst;
    const dueAt = Date.now() + dueInMs - 500;

    // Payers through the same multi-host URL, from the due instant until after the failover.
    const payers = createPool({ connectionString: url, max: PAYERS, applicationName: 'payer', logger: pino({ level: 'silent' }) });
    const acknowledged = new Set<number>();
    let ambiguous = 0;
    let refused = 0;
    let paying = true;
    const tried = new Set<number>();
    const payer = async () => {
      await sleep(Math.max(0, dueAt - Date.now()));
      while (paying) {
        const id = 1 + Math.floor(Math.random() * BURST);
        if (tried.has(id)) continue;
        tried.add(id);
        try {
          const r = await payers.query(`UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'`, [id]);
          if (r.rowCount === 1) acknowledged.add(id);
          else refused++;
        } catch {
          // The server went away mid-statement: the payment may or may not have committed.
          ambiguous++;
          await sleep(50);
        }
      }
    };
    const payerTasks = Array.from({ length: PAYERS }, payer);

    await midDrain(b, 0.2);
    const at = new Date();
    await f.kill(before);
    // The new primary accepts writes once the monitor promoted it and lifted its read-only guard.
    const probe = createPool({
      connectionString: `postgres://postgres@127.0.0.1:${standby.port}/center`,
      max: 1,
      applicationName: 'probe',
      logger: pino({ level: 'silent' }),
    });
    let answeringAt: Date | undefined;
    while (!answeringAt && Date.now() - at.getTime() < 90_000) {
      const ok = await probe
        .query<{ ok: boolean }>(`SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS ok`)
        .then((r) => r.rows[0]!.ok)
        .catch(() => false);
      if (ok) answeringAt = new Date();
      else await sleep(50);
    }
    await probe.end();
    expect(answeringAt, 'the monitor promoted the standby').toBeDefined();
    await sleep(1000);
    paying = false;
    await Promise.all(payerTasks);
    await payers.end();

    const figures = await b.finish('pg_auto_failover: center primary SIGKILLed under the burst', {
      at,
      answeringAt: answeringAt!,
      extra: { payments: { acknowledged: acknowledged.size, refused, ambiguous }, states: await f.states() },
    });
    // History = business truth.
    const s = b.s;
    const lostPayments = await s.count(
      `SELECT count(*) AS n FROM unnest($1::bigint[]) id LEFT JOIN orders o USING (id) WHERE o.status IS DISTINCT FROM 'paid'`,
      [[...acknowledged]],
    );
    expect(lostPayments, 'every payment acknowledged to a payer survived the failover, unclosed').toBe(0);
    const mismatched = await s.count(
      `SELECT count(*) AS n FROM orders o
        WHERE (o.status = 'closed') <> EXISTS (SELECT 1 FROM timeout_center.all_timeouts t WHERE t.biz_id = o.id::text AND t.state = 'done' AND t.result = 'applied')`,
    );
    expect(mismatched, 'an order is closed iff one of its timeouts was applied').toBe(0);
    expect((await f.primary()).name).toBe(standby.name);
    const resume = (figures['allKinds'] as { closesResumeAfterAnswerMs: number }).closesResumeAfterAnswerMs;
    expect(resume, 'closes resumed after the new primary accepted writes').toBeGreaterThanOrEqual(0);
  });
});
