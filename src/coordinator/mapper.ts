// Map, the second step of every leader tick: one statement reads the database clock, what is due
// and the shards in flight (next_due.sql); if there is room under maxInFlightShards and the due
// rows are not already covered by shards in flight, one statement writes a scan with shards for
// what is due beyond them (plan_shards.sql, via map.ts), and the dispatcher publishes them. With
// nothing in flight and the next due instant near, it counts that instant ahead (count_ahead.sql)
// and writes a flood's shards before it, each claimed no earlier than the instant. Returns how
// long to sleep before the next tick.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { CoordinatorConfig, LoadedConfig } from '../config.js';
import { layoutOf } from '../db/citus-layout.js';
import { failpoint } from '../failpoints.js';
import type { ControlsColumn, LeaderFlow, TargetControlsColumn } from '../flow/leader-flow.js';
import type { Metrics } from '../observability/metrics.js';
import type { Dispatcher } from './dispatch.js';
import type { LagMonitor } from './lag-monitor.js';
import { ClaimFloors, type FloorsRow } from './claim-floors.js';
import { countAhead, nextDueStatement, planScan, type PlannedScan } from './map.js';
import { creditParam, PlanMemory } from './plan-memory.js';
import type { UnservedKinds } from './unserved-kinds.js';
import { LONGEST_SLEEP_MS } from './tick-loop.js';
import { setActiveAttributes } from '../observability/tracing.js';

const BACKPRESSURE_RECHECK_MS = 100;
/** The same on the Citus layout: there a tick's probe (citus/due_probe.sql) is a read of every
 *  shard, 2-4 ms of the Citus coordinator's CPU, against two index probes on one PostgreSQL. While
 *  every due row is covered by shards in flight a tick only looks for rows due since, so a drain
 *  ticks 4 times a second instead of 10 (docs/benchmarks.md "A timeout database on Citus"). */
const CITUS_BACKPRESSURE_RECHECK_MS = 250;
/** With nothing in flight, the coordinator wakes this long before the next due instant to count
 *  what will be due at it (count_ahead.sql), so a flood's plan at the instant needs no count. */
const COUNT_AHEAD_MS = 500;
/** The largest adaptive shard plan_shards.sql writes (same-database SQL handlers in a flood). */
const MAX_ADAPTIVE_SHARD = 20_000;

/** Milliseconds from the database clock's now to a due time, rounded up: both come to us in whole
 *  milliseconds, and a timer that fires a fraction early finds nothing due and then waits out
 *  minTickIntervalMs. */
function untilDue(dueAt: Date, now: Date): number {
  return dueAt.getTime() - now.getTime() + 1;
}

interface Clock extends FloorsRow {
  now: Date;
  latest_due: Date | null;
  next_after: Date | null;
  in_flight: number;
  controls: ControlsColumn | null;
  target_controls: TargetControlsColumn | null;
  /** Kinds with work that no live worker serves (sql/0013). */
  unserved: string[];
}

export interface MapperDeps {
  config: LoadedConfig;
  pool: pg.Pool;
  flow: LeaderFlow;
  dispatcher: Dispatcher;
  lag: LagMonitor;
  unserved: UnservedKinds;
  metrics: Metrics;
  logger: Logger;
  coordinatorId: string;
  /** The store this leader maps (`center`: the center's database), for the metrics. */
  store: string;
  /** Claim floors shared with the lag monitor (default: the mapper's own). */
  floors?: ClaimFloors;
}

export class Mapper {
  /** What the map remembers between ticks; reset on every change of leadership. */
  readonly memory: PlanMemory;
  /** Per kind, where counts and claims read the due index from (sql/0030). */
  readonly floors: ClaimFloors;
  private readonly kinds: string[];
  private readonly maxShardSize: number;
  private readonly cfg: CoordinatorConfig;

  constructor(private readonly deps: MapperDeps) {
    this.kinds = Object.keys(deps.config.kinds);
    this.maxShardSize = Math.max(...Object.values(deps.config.kinds).map((k) => k.shardSize));
    this.cfg = deps.config.coordinator;
    this.floors = deps.floors ?? new ClaimFloors();
    this.memory = new PlanMemory((kind) => deps.config.kinds[kind]?.shardSize ?? Infinity);
  }

  /** One map step under `epoch`; returns how long to sleep (undefined: until cron). */
  async map(epoch: number): Promise<number | undefined> {
    try {
      return await this.step(epoch);
    } catch (err) {
      // A failed step may be the database failing over: a standby promoted without the last
      // claims has their rows pending again below the floors computed on the old primary.
      this.floors.reset();
      throw err;
    }
  }

  private async step(epoch: number): Promise<number | undefined> {
    const { pool, flow: leaderFlow, dispatcher, metrics, logger } = this.deps;
    const cfg = this.cfg;
    const recheckMs = (await layoutOf(pool)).name === 'citus' ? CITUS_BACKPRESSURE_RECHECK_MS : BACKPRESSURE_RECHECK_MS;
    const { rows } = await pool.query<Clock>(await nextDueStatement(pool, this.kinds, this.floors));
    const clock = rows[0]!;
    this.floors.update(clock);
    const clockReadAt = Date.now();
    this.deps.unserved.update(clock.unserved);
    const flow = leaderFlow.tick(clock.controls, clock.now.getTime(), clock.target_controls);
    let inFlight = clock.in_flight;
    const room = cfg.maxInFlightShards - inFlight;
    const due = clock.latest_due !== null;
    // Each plan counts the rows the shards in flight already cover: under a backlog, wait until a
    // quarter of the bound is free instead of counting again for every finished shard.
    const minRoom = inFlight === 0 ? 1 : Math.max(1, Math.floor(cfg.maxInFlightShards / 4));
    if (inFlight === 0) this.memory.nothingInFlight();
    // Skip the count when the last one found every due row covered by shards in flight (at
    // 1,000,000 due, a count every second re-read the covered rows for 4 % of statement time).
    const covered = this.memory.isCovered(clock.latest_due?.getTime() ?? null, flow.limited);
    let planned: PlannedScan | undefined;
    if (due && room >= minRoom && !covered) {
      const now = clock.now.getTime();
      const credit = this.memory.usableCredit(now);
      const aheadCredit = this.memory.plannedAheadCredit(now, clock.latest_due?.getTime() ?? null);
      await failpoint('coordinator.before-plan');
      const planStarted = performance.now();
      planned = await planScan(pool, epoch, {
        coordinatorId: this.deps.coordinatorId,
        cutoff: clock.now,
        kinds: this.kinds,
        maxShards: room,
        // A flood's first plan counts claimChunk rows, so its first shards go out within
        // milliseconds; once shards are in flight, a plan counts as far as its room can hold
        // (adaptive shards reach MAX_ADAPTIVE_SHARD rows), so a flood is covered in one more count
        // instead of one per claimChunk, each walking the rows already covered again.
        maxRows: Math.max(cfg.claimChunk, room * (inFlight === 0 ? this.maxShardSize : Math.max(this.maxShardSize, MAX_ADAPTIVE_SHARD))),
        credit: { ...aheadCredit, ...creditParam(credit) },
        rateBudget: flow.rateBudget,
        targetBudget: flow.targetBudget,
        goneAfterMs: this.deps.config.worker.goneAfterMs,
        ...this.floors.planInputs(),
      });
      this.memory.afterPlan(planned, credit, now, room);
      // The plan of a flood counted ahead became due at this instant: nothing of it is late yet.
      if (planned && inFlight === 0 && this.memory.usedCountAhead(credit)) this.deps.lag.deferFor(0);
      if (planned) {
        setActiveAttributes({ 'tc.scan.id': planned.scanId, 'tc.scan.shards': planned.shards.length });
        inFlight += planned.shards.length;
        await dispatcher.publishPlanned(planned);
        logger.debug(
          { scanId: planned.scanId, shards: planned.shards.length, capacity: planned.capacity, inFlight, planMs: Math.round(performance.now() - planStarted) },
          'scan mapped',
        );
      } else {
        logger.debug({ room, inFlight, planMs: Math.round(performance.now() - planStarted) }, 'nothing new to map');
      }
    }
    metrics.shardsInFlight.set({ store: this.deps.store }, inFlight);

    // A full room: more may be waiting. Shards written: more may have become due meanwhile.
    if (planned) return planned.shards.length >= room ? recheckMs : cfg.minTickIntervalMs;
    // Due rows all covered by shards in flight (or no room): look again when some have finished,
    // or when the next rows become due if that is sooner (a steady stream of due instants must
    // not wait out the recheck: the next tick sees them past the covered cutoff and plans them).
    if (due) return clock.next_after ? Math.min(recheckMs, untilDue(clock.next_after, clock.now)) : recheckMs;
    const nextDue = clock.next_after;
    // next_due.sql looks a minute ahead, the longest the loop sleeps anyway (looking further would
    // walk, under a held snapshot, every entry of the rows cancelled ahead of their due time):
    // nothing within it, look again then.
    if (!nextDue) return LONGEST_SLEEP_MS;
    // Nothing is due: sleep until the next claimable time, measured on the database clock. With
    // nothing in flight, first wake COUNT_AHEAD_MS before it and count what will be due then, so
    // that a flood's first shards go out at the instant instead of after a count of the flood.
    const until = untilDue(nextDue, clock.now);
    if (inFlight > 0 || dispatcher.waiting > 0) return until;
    if (until > COUNT_AHEAD_MS) return until - COUNT_AHEAD_MS;
    if (await this.countAhead(nextDue, room)) await this.planAhead(epoch, room, until - (Date.now() - clockReadAt));
    return Math.max(1, until - (Date.now() - clockReadAt));
  }

  /** Counts what will be due at the next due instant (once per instant) into the credit. Returns
   *  whether it counted now. */
  private async countAhead(nextDue: Date, room: number): Promise<boolean> {
    // next_after comes in whole milliseconds (a Date); a row due within that millisecond belongs
    // to it. The plan uses this credit only once the database clock has passed this cutoff.
    const cutoff = nextDue.getTime() + 1;
    if (!this.memory.claimCountAhead(cutoff)) return false;
    const started = performance.now();
    const counts = await countAhead(this.deps.pool, {
      kinds: this.kinds,
      cutoff: new Date(cutoff),
      maxRows: room * Math.max(this.maxShardSize, MAX_ADAPTIVE_SHARD),
      ...this.floors.planInputs(),
    });
    this.memory.countedAhead(cutoff, counts);
    if (counts.size > 0) {
      this.deps.logger.debug(
        { cutoff: new Date(cutoff), kinds: Object.fromEntries(counts), countMs: Math.round(performance.now() - started) },
        'counted ahead of the due instant',
      );
    }
    return true;
  }

  /**
   * Right after a count ahead: writes and publishes the counted rows' shards now, each claimed no
   * earlier than the due instant (shards.not_before, sql/0011). The workers take their first
   * shards' leases before the instant and claim at it, instead of waiting for a plan, a publish
   * and a lease after it. Only kinds whose count is this instant's (count_ahead.sql: no flow
   * control, one database); what the room did not take stays credit for the plan at the instant.
   */
  private async planAhead(epoch: number, room: number, untilMs: number): Promise<void> {
    // Two shards' worth or more only: mapped ahead, instants of a steady stream closed 3-5 ms
    // sooner in the median but 6-12 ms later at p99 (5,000/s; bench/analysis.md, fifth pass).
    const ahead = this.memory.creditToPlanAhead();
    if (!ahead) return;
    const { cutoff, credit } = ahead;
    await failpoint('coordinator.before-plan');
    const planStarted = performance.now();
    const planned = await planScan(this.deps.pool, epoch, {
      coordinatorId: this.deps.coordinatorId,
      cutoff: new Date(cutoff),
      kinds: [...credit.keys()],
      maxShards: room,
      maxRows: this.cfg.claimChunk,
      credit: creditParam(credit),
      rateBudget: {},
      targetBudget: {},
      notBefore: new Date(cutoff),
      goneAfterMs: this.deps.config.worker.goneAfterMs,
      ...this.floors.planInputs(),
    });
    if (!planned) return;
    this.memory.plannedAheadOf(cutoff, planned, credit);
    // Nothing of this flood is late before its instant (lag-schedule.ts).
    this.deps.lag.deferFor(Math.max(0, untilMs));
    await this.deps.dispatcher.publishPlanned(planned);
    this.deps.logger.debug(
      {
        scanId: planned.scanId,
        shards: planned.shards.length,
        capacity: planned.capacity,
        notBefore: new Date(cutoff),
        planMs: Math.round(performance.now() - planStarted),
      },
      'scan mapped ahead of its due instant',
    );
  }
}
