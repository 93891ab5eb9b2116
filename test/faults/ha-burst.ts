// The burst the Redis failover tests run (issue 26): 50,000 timeouts over three kinds, due at
// once, two coordinators and two workers as processes, a fault mid-drain, then the invariants and
// the longest gap in closes around the fault, measured on the database clock (order_transitions.at
// is clock_timestamp() at the close).
import { expect } from 'vitest';
import { streamKey } from '../../src/transport/keys.js';
import { KIND, report, Scenario, waitUntil } from './harness.js';

export const KINDS = [KIND, 'order.unshipped', 'order.unconfirmed'] as const;
export const BURST = 50_000;
const PER_KIND = Math.ceil(BURST / KINDS.length);

export interface Burst {
  s: Scenario;
  /** Stream key of each kind (with the scenario's prefix). */
  streams: Record<string, string>;
  /** The database's clock now (for fault and recovery instants). */
  dbNow(): Promise<Date>;
  /** Orders closed so far. */
  closed(): Promise<number>;
  /** Waits for the drain, checks the invariants, reports the gaps. */
  finish(label: string, fault: { at: Date; answeringAt: Date; kind?: string; extra?: Record<string, unknown> }): Promise<Record<string, unknown>>;
}

/** Order ids of a kind: kind i holds [i * PER_KIND + 1, (i + 1) * PER_KIND]. */
const idRange = (kind: string): [number, number] => {
  const i = KINDS.indexOf(kind as (typeof KINDS)[number]);
  return [i * PER_KIND + 1, Math.min((i + 1) * PER_KIND, BURST)];
};

export async function startBurst(label: string, redisEnv: Record<string, string>, options: { databaseUrl?: string; dueInMs?: number } = {}): Promise<Burst> {
  const s = await Scenario.create(label, {
    redisEnv,
    ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
    extraKinds: KINDS.slice(1),
    // Shards of 500: 100 shards in all, so the drain lasts a few seconds on two cores.
    kind: { shardSize: 500 },
    poolSize: 3,
  });
  const coordinators = [s.coordinator('coordinator-a'), s.coordinator('coordinator-b')];
  // 60 s: the first leader waits on the processes' start-up, which a busy box (a Citus drain in the
  // file run beside this one) stretches past 20 s; what is asserted is what follows, not this.
  await Promise.any(coordinators.map((c) => c.waitForMsg('became leader', 60_000))).catch(() => {
    throw new Error(
      `no coordinator became leader within 60 s: ${coordinators.map((c) => `${c.name}: ${JSON.stringify(c.lines.slice(-3))} ${c.stderr.slice(-300)}`).join('\n')}`,
    );
  });
  const workers = [s.worker('worker-1'), s.worker('worker-2')];
  await Promise.all(workers.map((w) => w.waitForMsg('worker started', 60_000)));
  for (const kind of KINDS) {
    const [from, to] = idRange(kind);
    await s.seed(to - from + 1, { from, kind, dueInMs: options.dueInMs ?? 0 });
  }
  const dbNow = async () => (await s.pool.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t;
  const closed = () => s.count(`SELECT count(*) AS n FROM order_transitions WHERE to_status = 'closed'`);
  return {
    s,
    streams: Object.fromEntries(KINDS.map((k) => [k, streamKey(s.prefix, k)])),
    dbNow,
    closed,
    async finish(name, fault) {
      const inv = await s.expectInvariants(60_000);
      // Orders paid before their close (payers at the due instant) are skipped, never closed.
      const paid = await s.count(`SELECT count(*) AS n FROM orders WHERE status = 'paid'`);
      expect(inv.applied + paid).toBe(BURST);
      for (const p of s.procs) expect(p.alive, `${p.name} survived`).toBe(true);
      const gap = async (range?: [number, number]) => {
        const { rows } = await s.pool.query<{ gap: number | null; resume: number | null; first: number | null }>(
          `WITH c AS (SELECT at, lag(at) OVER (ORDER BY at) AS prev FROM order_transitions
                       WHERE to_status = 'closed' AND order_id BETWEEN $3 AND $4)
           SELECT (SELECT max(extract(epoch FROM at - greatest(prev, $1)) * 1000) FROM c WHERE at >= $1)::float8 AS gap,
                  (SELECT extract(epoch FROM min(at) - $2) * 1000 FROM c WHERE at >= $2)::float8 AS resume,
                  (SELECT extract(epoch FROM min(at) - $1) * 1000 FROM c WHERE at >= $1)::float8 AS first`,
          [fault.at, fault.answeringAt, range?.[0] ?? 0, range?.[1] ?? Number.MAX_SAFE_INTEGER],
        );
        return { longestGapMs: Math.round(rows[0]!.gap ?? 0), closesResumeAfterAnswerMs: Math.round(rows[0]!.resume ?? -1) };
      };
      const all = await gap();
      const kind = fault.kind ? await gap(idRange(fault.kind)) : undefined;
      const republished = await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE publish_count > 1`);
      const figures = {
        timeouts: BURST,
        applied: inv.applied,
        ...(paid > 0 ? { paid } : {}),
        answeringAfterFaultMs: fault.answeringAt.getTime() - fault.at.getTime(),
        allKinds: all,
        ...(kind ? { faultedKind: { kind: fault.kind, ...kind } } : {}),
        republishedShards: republished,
        ...fault.extra,
        wallMs: s.elapsedMs(),
      };
      await s.stopAll();
      report(name, figures);
      return figures;
    },
  };
}

/** Waits until a share of the burst is closed (the fault then lands mid-drain). */
export async function midDrain(b: Burst, share = 0.2): Promise<number> {
  await waitUntil('the drain under way', async () => (await b.closed()) >= BURST * share, 60_000, 20);
  return b.closed();
}

/** What each process logged about a Redis failover between `at` and `until`: every line at warn or above, and
 *  every line about Redis at any level (a node back, Redis reachable again), with how many there
 *  were of each message and the nodes they named. */
export interface FailoverLog {
  process: string;
  lines: number;
  errors: number;
  byMessage: Record<string, number>;
  /** `Redis unreachable ...` / `Redis reachable again` lines that name no node (host:port). */
  unnamed: string[];
}

/** "A handful": what a process may log about one failover (issue 31, point 3). A leader can have
 *  eight distinct things to say: the node unreachable, a publish refused (once per outage:
 *  dispatch.ts), a tick failed, it stepped down (its lock lost with the master), Redis reachable
 *  again, the shard channel's marker gone with an unreplicated write (shards republished), the
 *  reaper's recovery (up to twice: a pass may find shards the one before left), ticking again.
 *  A write of its own earlier term refused after it won the lock back is info and not counted.
 *  A flood is the same line over and over: no message more than MAX_FAILOVER_REPEATS times. */
export const MAX_FAILOVER_LINES = 9;
export const MAX_FAILOVER_REPEATS = 2;

const REDIS_LINE = /redis/i;
/** The lines that say Redis (or one node) is gone or back: each must name its node(s). */
const REACHABILITY = /^Redis (unreachable|reachable again)/;
const NODE = /^[\w.-]+:\d+$/;

export function failoverLog(b: Pick<Burst, 's'>, at: Date, until: Date): FailoverLog[] {
  return b.s.procs.map((p) => {
    const lines = p.lines.filter((l) => {
      const time = typeof l.time === 'number' ? l.time : Date.parse(String(l.time));
      return time >= at.getTime() && time <= until.getTime() && ((l.level ?? 30) >= 40 || REDIS_LINE.test(String(l.msg)));
    });
    const byMessage: Record<string, number> = {};
    const unnamed: string[] = [];
    for (const l of lines) {
      const msg = String(l.msg);
      byMessage[msg] = (byMessage[msg] ?? 0) + 1;
      const nodes = [l['node'], ...((l['nodes'] as unknown[] | undefined) ?? [])].filter((n) => n !== undefined);
      if (REACHABILITY.test(msg) && !(nodes.length > 0 && nodes.every((n) => NODE.test(String(n))))) {
        const err = l['err'] as { message?: string } | undefined;
        unnamed.push(err?.message ? `${msg} (${err.message})` : msg);
      }
    }
    return { process: p.name, lines: lines.length, errors: lines.filter((l) => (l.level ?? 30) >= 50).length, byMessage, unnamed };
  });
}
