// Scenario 8: node clocks 30 s ahead and 30 s behind (libfaketime preloaded into the Node
// processes), coordinator and worker skewed in opposite directions. Nothing may close early
// (a node 30 s ahead reading its own clock would close everything at once) or late (30 s behind
// would wait 30 s): every due time is compared with PostgreSQL's now().
import { afterEach, describe, expect, it } from 'vitest';
import { killAll, type CliProcess } from '../helpers/processes.js';
import { requireTools, toolCommand } from '../helpers/system-tools.js';
import { report, Scenario, waitUntil } from './harness.js';

const faketime = requireTools('faketime');
const N = 1000;
let s: Scenario | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
});

function skewed(offset: string): Record<string, string> {
  return { LD_PRELOAD: toolCommand('faketime')[0], FAKETIME: offset, FAKETIME_DONT_RESET: '1' };
}

/** The process's own clock minus ours, from the pino time of a log line it just wrote. */
async function measuredSkewMs(p: CliProcess, msg: string): Promise<number> {
  const line = await p.waitForMsg(msg, 15_000);
  return Date.parse(String(line['time'])) - Date.now();
}

describe.skipIf(faketime.skip).each([
  { coordinatorSkew: '+30s', workerSkew: '-30s' },
  { coordinatorSkew: '-30s', workerSkew: '+30s' },
])(faketime.title('clock skew: coordinator $coordinatorSkew, worker $workerSkew'), ({ coordinatorSkew, workerSkew }) => {
  it('nothing closes before its due time or 30 s late: time comes from PostgreSQL', async () => {
    s = await Scenario.create(`fault-clock-${coordinatorSkew}`);
    const worker = s.worker('worker', { env: skewed(workerSkew) });
    const coordinator = s.coordinator('coordinator', { env: skewed(coordinatorSkew) });
    const workerSkewMs = await measuredSkewMs(worker, 'worker started');
    const coordinatorSkewMs = await measuredSkewMs(coordinator, 'became leader');
    // faketime really applies (±30 s, give or take the log's delivery).
    expect(Math.abs(coordinatorSkewMs - (coordinatorSkew.startsWith('+') ? 30_000 : -30_000))).toBeLessThan(3000);
    expect(Math.abs(workerSkewMs - (workerSkew.startsWith('+') ? 30_000 : -30_000))).toBeLessThan(3000);

    // Due 1.5 s to 2.5 s from now on the database clock.
    await s.seed(N, { dueInMs: 1500, spreadMs: 1000 });
    await waitUntil(
      'every timeout due',
      async () => (await s!.count(`SELECT count(*) AS n FROM timeout_center.all_timeouts WHERE due_at > now()`)) === 0,
      10_000,
    );
    const inv = await s.expectInvariants(20_000);
    expect(inv.applied).toBe(N);
    const { rows } = await s.pool.query<{ early: number; max_late_ms: number; avg_late_ms: number }>(
      `SELECT count(*) FILTER (WHERE finished_at < due_at)::int AS early,
              (extract(epoch FROM max(finished_at - due_at)) * 1000)::float8 AS max_late_ms,
              (extract(epoch FROM avg(finished_at - due_at)) * 1000)::float8 AS avg_late_ms
         FROM timeout_center.all_timeouts`,
    );
    const r = rows[0]!;
    expect(r.early).toBe(0);
    expect(r.max_late_ms).toBeLessThan(5000);
    // No shard was mapped before any of its rows was due (a coordinator reading its own clock 30 s
    // ahead would map these rows as soon as they were seeded, 1.5-2.5 s before their due time),
    // unless it was mapped ahead of a flood's instant (count_ahead.sql; sql/0011): then its
    // not_before, on the database clock, is when its worker may claim. A shard that runs late may
    // legitimately claim rows that fell due after it was mapped (its claim takes the rows due when
    // it runs, skipping those other shards hold), so the check is per shard, on its first due row,
    // with 1 s for a late run; that nothing was claimed before its due time is `early` above.
    const mappedEarly = await s.pool.query<{ id: string; created_at: Date; not_before: Date | null; first_due: Date; n: number }>(
      `SELECT sh.id, sh.created_at, sh.not_before, min(t.due_at) AS first_due, count(*)::int AS n
         FROM timeout_center.shards sh JOIN timeout_center.all_timeouts t ON t.shard_id = sh.id
        GROUP BY sh.id
       HAVING min(t.due_at) > coalesce(sh.not_before, sh.created_at) + interval '1 second'`,
    );
    expect(mappedEarly.rows, 'shards mapped before any of their rows was due').toEqual([]);
    await s.stopAll();
    report(`8 clock skew coordinator ${coordinatorSkew} worker ${workerSkew}`, {
      timeouts: N,
      applied: inv.applied,
      measuredSkewMs: { coordinator: coordinatorSkewMs, worker: workerSkewMs },
      closedEarly: r.early,
      maxLatenessMs: Math.round(r.max_late_ms),
      avgLatenessMs: Math.round(r.avg_late_ms),
      wallMs: s.elapsedMs(),
    });
  });
});
