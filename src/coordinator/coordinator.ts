// The coordinator: while it leads, each tick recovers lost shards (reaper), closes finished scans
// (reduce), then writes shards for what is due and publishes them (map + dispatch); workers claim
// the shards' rows themselves. node-cron drives the safety-net tick; the coordinator also wakes
// early at the next known due time. All times it compares come from PostgreSQL's now().
import cron, { type ScheduledTask } from 'node-cron';
import type pg from 'pg';
import type { Logger } from 'pino';
import { Alerter } from '../alerts/alerter.js';
import type { LoadedConfig } from '../config.js';
import { query } from '../db/queries.js';
import { failpoint } from '../failpoints.js';
import { LeaderFlow, type ControlsColumn, type TargetControlsColumn } from '../flow/leader-flow.js';
import type { Metrics } from '../observability/metrics.js';
import type { ShardChannel, ShardMessage } from '../transport/channel.js';
import { FencedError } from './fence.js';
import type { Leadership } from './leadership.js';
import { countAhead, planScan, type PlannedScan } from './map.js';
import { deferredUntil, lagCheckDue } from './lag-schedule.js';
import { reap } from './reaper.js';
import { consecutiveFailedScans, reduceScans, type ReducedScan } from './reduce.js';

const REAP_EVERY_MS = 1000;
/** How long rows counted but not yet given shards are trusted before the map counts again. */
const CREDIT_TTL_MS = 1000;
/** How long "every due row is covered by shards in flight" is trusted without a new count. */
const COVERED_TTL_MS = 5000;
const BACKPRESSURE_RECHECK_MS = 100;
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

export interface CoordinatorDeps {
  config: LoadedConfig;
  pool: pg.Pool;
  channel: ShardChannel;
  leadership: Leadership;
  metrics: Metrics;
  logger: Logger;
  coordinatorId: string;
}

export class Coordinator {
  private readonly config: LoadedConfig;
  private readonly kinds: string[];
  private readonly maxShardSize: number;
  private readonly alerter: Alerter;
  private task: ScheduledTask | undefined;
  private wakeTimer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private tickAgain = false;
  private running = false;
  /** Shards written but not yet published (Redis refused): retried first on the next tick. */
  private unpublished: ShardMessage[] = [];
  private lastReapAt = 0;
  /** Per kind: due rows a count found beyond the shards in flight that no shard covers yet (the
   *  room did not take them, or they were counted ahead of their due instant). Only shards of
   *  this leader's plans claim them, so the next plans use this instead of counting the same rows
   *  again (at most CREDIT_TTL_MS old). complete: that count saw the last row due by its cutoff
   *  (database clock, ms). */
  private credit = new Map<string, Credit>();
  /** When a count last found every due row covered by the shards in flight (see tick). */
  private coveredAt: { cutoff: Date; at: number } | undefined;
  /** The due instant (cutoff) last counted ahead: counted once, whatever the ticks before it. */
  private countedAheadFor: number | undefined;
  /** The kinds whose rows due by cutoff (database clock, ms) went into shards written ahead of
   *  that instant (planAhead): the plan at the instant does not count them again. */
  private plannedAhead: { cutoff: number; kinds: Set<string>; at: number } | undefined;
  private lastLagCheckAt = 0;
  /** A flood mapped from a count ahead puts the lag check off until this time (local clock;
   *  lag-schedule.ts). */
  private lagCheckNotBefore = 0;
  private lastLagAlertAt = 0;
  /** Flow control: the kinds' controls as gauges, and the rate limits' token buckets. */
  private readonly flow: LeaderFlow;

  constructor(private readonly deps: CoordinatorDeps) {
    this.config = deps.config;
    this.kinds = Object.keys(deps.config.kinds);
    this.maxShardSize = Math.max(...Object.values(deps.config.kinds).map((k) => k.shardSize));
    this.alerter = new Alerter(deps.config.alerts, deps.logger, deps.metrics, deps.coordinatorId);
    this.flow = new LeaderFlow(deps.metrics);
    deps.leadership.on('elected', (epoch) => {
      deps.metrics.leader.set(1);
      deps.metrics.epoch.set(epoch);
      this.lastReapAt = 0; // a new leader recovers at once
      this.credit.clear();
      this.countedAheadFor = undefined;
      this.plannedAhead = undefined;
      this.coveredAt = undefined;
      this.flow.reset();
      this.requestTick();
    });
    deps.leadership.on('deposed', () => {
      this.credit.clear();
      this.countedAheadFor = undefined;
      this.plannedAhead = undefined;
      this.coveredAt = undefined;
      deps.metrics.leader.set(0);
      deps.metrics.epoch.set(0);
      this.clearLeaderGauges();
      this.flow.reset();
    });
  }

  get isLeader(): boolean {
    return this.deps.leadership.isLeader;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    if (!cron.validate(this.config.coordinator.schedule)) {
      throw new Error(`coordinator.schedule: "${this.config.coordinator.schedule}" is not a valid cron expression`);
    }
    this.task = cron.schedule(this.config.coordinator.schedule, () => this.requestTick(), {
      name: 'timeout-center-tick',
      // node-cron reports missed ticks (a busy event loop) on the console; send them to our log.
      logger: {
        info: (m: string) => this.deps.logger.debug({ source: 'node-cron' }, m),
        warn: (m: string) => this.deps.logger.debug({ source: 'node-cron' }, m),
        error: (m: string | Error) => this.deps.logger.warn({ source: 'node-cron', err: m }, 'node-cron error'),
        debug: () => {},
      },
    });
    this.deps.leadership.start();
  }

  /** Runs a tick now, or right after the one in progress. */
  requestTick(): void {
    if (!this.running) return;
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    this.ticking = this.runTick().finally(() => {
      this.ticking = undefined;
      if (this.tickAgain && this.running) {
        this.tickAgain = false;
        this.requestTick();
      }
    });
  }

  private async runTick(): Promise<void> {
    const started = Date.now();
    try {
      const wakeInMs = await this.tick();
      if (wakeInMs !== undefined) this.wakeIn(wakeInMs);
    } catch (err) {
      if (err instanceof FencedError) {
        this.deps.metrics.fenced.inc();
        const { leadership } = this.deps;
        if (leadership.isLeader && leadership.epoch === err.currentEpoch) {
          // A tick that began under our previous term (e.g. it hung on Redis while we lost the
          // lock and won it again) was refused: right, but no reason to give up the new term.
          this.deps.logger.warn(
            { epoch: err.epoch, currentEpoch: err.currentEpoch },
            `fenced: ${err.message}; that write came from this coordinator's earlier term, it still leads under epoch ${err.currentEpoch}`,
          );
        } else {
          this.deps.logger.error({ epoch: err.epoch, currentEpoch: err.currentEpoch, holder: err.holder }, `fenced: ${err.message}; stepping down`);
          leadership.stepDown('fenced by a newer epoch');
        }
      } else {
        this.deps.logger.error({ err, ms: Date.now() - started }, 'coordinator tick failed; the next tick retries');
      }
    }
  }

  private wakeIn(ms: number): void {
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    const delay = Math.max(this.config.coordinator.minTickIntervalMs, Math.min(ms, 60_000));
    this.wakeTimer = setTimeout(() => this.requestTick(), delay);
  }

  /** One tick. Returns how long to sleep before the next one (undefined: wait for cron). */
  async tick(): Promise<number | undefined> {
    const { leadership, pool, channel, logger, metrics } = this.deps;
    if (!leadership.isLeader) return undefined;
    const epoch = leadership.epoch;
    const cfg = this.config.coordinator;

    // Recover first: republish what Redis lost or a dead worker left behind.
    const channelLost = await channel.checkLostAndMark();
    if (channelLost || Date.now() - this.lastReapAt >= REAP_EVERY_MS) {
      this.lastReapAt = Date.now();
      const reaped = await reap(pool, epoch, { republishAfterMs: cfg.republishAfterMs, channelLost });
      if (reaped.republish.length > 0 || reaped.abandoned.length > 0 || reaped.orphanScans > 0) {
        logger.warn(
          { requeued: reaped.requeued, stale: reaped.stale, abandoned: reaped.abandoned.length, orphanScans: reaped.orphanScans, channelLost },
          'reaper recovered shards',
        );
        metrics.reclaims.inc({ source: channelLost ? 'channel_lost' : 'stale_queue' }, reaped.stale);
        metrics.reclaims.inc({ source: 'lease_expired' }, reaped.requeued);
        metrics.reclaims.inc({ source: 'abandoned' }, reaped.abandoned.length);
      }
      for (const a of reaped.abandoned) {
        // Failed shards and their timeouts show per kind beside the workers' outcomes.
        metrics.shards.inc({ kind: a.kind, outcome: 'failed' });
        metrics.timeouts.inc({ kind: a.kind, outcome: 'failed' }, a.failed);
        void this.alerter.raise({
          type: 'shard_abandoned',
          message: `shard ${a.shardId} (${a.kind}, scan ${a.scanId}) was abandoned by its workers too many times; ${a.failed} timeouts marked failed`,
          details: { ...a },
        });
      }
      this.unpublished.push(...reaped.republish);
    }
    await this.flushUnpublished();

    // Map: one statement writes a scan with shards for what is due beyond the shards in flight,
    // while they stay under the bound.
    const { rows } = await pool.query<{ now: Date; latest_due: Date | null; next_after: Date | null; in_flight: number; controls: ControlsColumn | null; target_controls: TargetControlsColumn | null }>(
      query(new URL('.', import.meta.url), 'next_due'),
      [this.kinds],
    );
    const clock = rows[0]!;
    const clockReadAt = Date.now();
    const flow = this.flow.tick(clock.controls, clock.now.getTime(), clock.target_controls);
    let inFlight = clock.in_flight;
    const room = cfg.maxInFlightShards - inFlight;
    const due = clock.latest_due !== null;
    // Each plan counts the rows the shards in flight already cover: under a backlog, wait until a
    // quarter of the bound is free instead of counting again for every finished shard.
    const minRoom = inFlight === 0 ? 1 : Math.max(1, Math.floor(cfg.maxInFlightShards / 4));
    // Skip the count when the last one found every due row covered by shards in flight, some are
    // still in flight, and nothing has become due since (the latest due time is not past that
    // count's cutoff): it would only re-read the covered rows. A row inserted meanwhile with a due
    // time already past sorts among the covered ones, so the shards in flight claim it; what it
    // displaces (the last covered row) is counted again after COVERED_TTL_MS, or as soon as
    // nothing is in flight, whatever is due then being uncovered. (At 1,000,000 due, a count
    // every second re-read the covered rows for 4 % of all statement time.)
    if (inFlight === 0) {
      this.coveredAt = undefined;
      this.plannedAhead = undefined;
    }
    // (Never while a kind is capped or rate-limited: a plan that gave nothing may have held back
    // rows that are due, not found them covered.)
    const covered = !flow.limited && this.coveredAt !== undefined && Date.now() - this.coveredAt.at < COVERED_TTL_MS && (clock.latest_due === null || clock.latest_due <= this.coveredAt.cutoff);
    let planned: PlannedScan | undefined;
    if (due && room >= minRoom && !covered) {
      const credit = this.usableCredit(clock.now);
      const aheadCredit = this.plannedAheadCredit(clock.now, clock.latest_due);
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
      });
      this.updateCredit(planned, credit, clock.now);
      // Nothing new due (no plan), or a plan whose counts (now, or the credit's) saw the last due
      // row of every kind and planned all of them: the due rows as of the earliest of those
      // counts' cutoffs are covered, and the next ticks need not count them again (one count of
      // the whole flood saved).
      this.coveredAt = !planned
        ? { cutoff: clock.now, at: Date.now() }
        : coversAll(planned, room)
          ? { cutoff: coveredCutoff(planned, credit, clock.now), at: Date.now() }
          : undefined;
      // The plan of a flood counted ahead became due at this instant: nothing of it is late yet,
      // and the lag check reads every due row while the first shards claim (lag-schedule.ts).
      if (planned && inFlight === 0 && [...credit.values()].some((c) => c.cutoff === this.countedAheadFor)) this.deferLagCheck(0);
      if (planned) {
        inFlight += planned.shards.length;
        await this.publishPlanned(planned);
        logger.debug({ scanId: planned.scanId, shards: planned.shards.length, capacity: planned.capacity, inFlight, planMs: Math.round(performance.now() - planStarted) }, 'scan mapped');
      } else {
        logger.debug({ room, inFlight, planMs: Math.round(performance.now() - planStarted) }, 'nothing new to map');
      }
    }
    metrics.shardsInFlight.set(inFlight);
    // Reduce after the map: a tick woken by a due instant plans it first (the reduce is a fenced
    // transaction of its own, and a scan mapped now has nothing to reduce yet).
    const reduced = await reduceScans(pool, epoch);
    await this.afterReduce(reduced);
    await this.checkLag();

    // A full room: more may be waiting. Shards written: more may have become due meanwhile.
    if (planned) return planned.shards.length >= room ? BACKPRESSURE_RECHECK_MS : cfg.minTickIntervalMs;
    // Due rows all covered by shards in flight (or no room): look again when some have finished,
    // or when the next rows become due if that is sooner (a steady stream of due instants must
    // not wait out the recheck: the next tick sees them past the covered cutoff and plans them).
    if (due) return clock.next_after ? Math.min(BACKPRESSURE_RECHECK_MS, untilDue(clock.next_after, clock.now)) : BACKPRESSURE_RECHECK_MS;
    const nextDue = clock.next_after;
    if (!nextDue) return undefined;
    // Nothing is due: sleep until the next claimable time, measured on the database clock. With
    // nothing in flight, first wake COUNT_AHEAD_MS before it and count what will be due then, so
    // that a flood's first shards go out at the instant instead of after a count of the flood.
    const until = untilDue(nextDue, clock.now);
    if (inFlight > 0 || this.unpublished.length > 0) return until;
    if (until > COUNT_AHEAD_MS) return until - COUNT_AHEAD_MS;
    if (await this.countAhead(nextDue, room)) await this.planAhead(epoch, room, until - (Date.now() - clockReadAt));
    return Math.max(1, until - (Date.now() - clockReadAt));
  }

  /**
   * Right after a count ahead: writes and publishes the counted rows' shards now, each claimed no
   * earlier than the due instant (shards.not_before, sql/0011). The workers take their first
   * shards' leases before the instant and claim at it, instead of waiting for a plan, a publish
   * and a lease after it. Only kinds whose count is this instant's (count_ahead.sql: no flow
   * control, one database); what the room did not take stays credit for the plan at the instant.
   */
  private async planAhead(epoch: number, room: number, untilMs: number): Promise<void> {
    const cutoff = this.countedAheadFor;
    // Two shards' worth or more only: an instant of a steady stream (a shard or so) is planned at
    // the instant from the credit, as before. Mapped ahead, such instants closed 3-5 ms sooner in
    // the median but 6-12 ms later at p99 (5,000/s; bench/analysis.md, fifth pass).
    const credit = new Map([...this.credit].filter(([kind, c]) => c.cutoff === cutoff && c.rows >= 2 * (this.config.kinds[kind]?.shardSize ?? Infinity)));
    if (cutoff === undefined || credit.size === 0) return;
    const { pool, logger } = this.deps;
    await failpoint('coordinator.before-plan');
    const planStarted = performance.now();
    const planned = await planScan(pool, epoch, {
      coordinatorId: this.deps.coordinatorId,
      cutoff: new Date(cutoff),
      kinds: [...credit.keys()],
      maxShards: room,
      maxRows: this.config.coordinator.claimChunk,
      credit: creditParam(credit),
      rateBudget: {},
      targetBudget: {},
      notBefore: new Date(cutoff),
    });
    if (!planned) return;
    this.updateCredit(planned, credit, new Date(cutoff));
    this.plannedAhead = { cutoff, kinds: new Set(planned.byKind.keys()), at: Date.now() };
    // Nothing of this flood is late before its instant (lag-schedule.ts).
    this.deferLagCheck(Math.max(0, untilMs));
    await this.publishPlanned(planned);
    logger.debug(
      { scanId: planned.scanId, shards: planned.shards.length, capacity: planned.capacity, notBefore: new Date(cutoff), planMs: Math.round(performance.now() - planStarted) },
      'scan mapped ahead of its due instant',
    );
  }

  /** For the plan at an instant whose rows went into shards ahead of it: the kinds planned ahead
   *  count as covered ([0 uncovered, complete]) while nothing has become due past that instant and
   *  no credit is left for them; other kinds are counted as usual. */
  private plannedAheadCredit(now: Date, latestDue: Date | null): Record<string, [number, boolean]> {
    const ahead = this.plannedAhead;
    if (!ahead) return {};
    if (Date.now() - ahead.at >= COVERED_TTL_MS || (latestDue !== null && latestDue.getTime() > ahead.cutoff)) {
      this.plannedAhead = undefined;
      return {};
    }
    if (ahead.cutoff > now.getTime()) return {};
    const out: Record<string, [number, boolean]> = {};
    for (const kind of ahead.kinds) if (!this.credit.has(kind)) out[kind] = [0, true];
    return out;
  }

  /** Counts what will be due at the next due instant (once per instant) into the credit. Returns
   *  whether it counted now. */
  private async countAhead(nextDue: Date, room: number): Promise<boolean> {
    // next_after comes in whole milliseconds (a Date); a row due within that millisecond belongs
    // to it. The plan uses this credit only once the database clock has passed this cutoff.
    const cutoff = nextDue.getTime() + 1;
    if (this.countedAheadFor === cutoff) return false;
    this.countedAheadFor = cutoff;
    const started = performance.now();
    const counts = await countAhead(this.deps.pool, {
      kinds: this.kinds,
      cutoff: new Date(cutoff),
      maxRows: room * Math.max(this.maxShardSize, MAX_ADAPTIVE_SHARD),
    });
    const at = Date.now();
    for (const [kind, c] of counts) this.credit.set(kind, { rows: c.uncovered, complete: c.complete, cutoff, at });
    if (counts.size > 0) {
      this.deps.logger.debug({ cutoff: new Date(cutoff), kinds: Object.fromEntries(counts), countMs: Math.round(performance.now() - started) }, 'counted ahead of the due instant');
    }
    return true;
  }

  /** The credit a plan at this database time may use instead of counting. */
  private usableCredit(now: Date): Map<string, Credit> {
    const out = new Map<string, Credit>();
    const local = Date.now();
    for (const [kind, c] of this.credit) {
      // Less than a full shard left: count again rather than plan a part-empty shard on trust.
      // Counted ahead for an instant not reached yet: rows between now and it are not due.
      if (local - c.at < CREDIT_TTL_MS && c.cutoff <= now.getTime() && c.rows >= (this.config.kinds[kind]?.shardSize ?? Infinity)) out.set(kind, c);
    }
    return out;
  }

  private updateCredit(planned: PlannedScan | undefined, used: Map<string, Credit>, now: Date): void {
    const next = new Map<string, Credit>();
    for (const [kind, k] of planned?.byKind ?? []) {
      const left = k.uncovered - k.planned;
      const earlier = k.counted ? undefined : used.get(kind);
      if (left > 0) next.set(kind, { rows: left, complete: k.complete, cutoff: earlier?.cutoff ?? now.getTime(), at: earlier?.at ?? Date.now() });
    }
    this.credit = next;
  }

  /** A plan's shards go to flow control's books and the metrics, then to Redis (kept for the next
   *  tick if Redis refuses). */
  private async publishPlanned(planned: PlannedScan): Promise<void> {
    this.flow.planned(planned.byKind, planned.byTarget);
    this.deps.metrics.planned.inc(planned.capacity);
    this.deps.metrics.plannedDeprecated.inc(planned.capacity);
    await failpoint('coordinator.before-publish');
    this.unpublished.push(...planned.shards);
    await this.flushUnpublished();
  }

  private async flushUnpublished(): Promise<void> {
    if (this.unpublished.length === 0) return;
    const batch = this.unpublished;
    this.unpublished = [];
    try {
      await this.deps.channel.publish(batch);
    } catch (err) {
      // The shards stay queued in PostgreSQL; keep them to retry next tick (and the reaper
      // republishes them anyway after republishAfterMs).
      this.unpublished = batch.concat(this.unpublished).slice(0, 100_000);
      this.deps.logger.warn({ err, shards: batch.length }, 'could not publish shards to Redis; will retry');
    }
  }

  private async afterReduce(reduced: ReducedScan[]): Promise<void> {
    const { metrics, logger, pool } = this.deps;
    let anyFailed = false;
    for (const scan of reduced) {
      metrics.scanDuration.observe(scan.duration_s);
      metrics.scans.inc({ result: scan.failed > 0 ? 'failed' : 'ok' });
      logger.info(
        { scanId: scan.id, claimed: scan.claimed, done: scan.done, skipped: scan.skipped, failed: scan.failed, retried: scan.retried, shards: scan.shard_count },
        'scan reduced',
      );
      if (scan.failed > 0) {
        anyFailed = true;
        void this.alerter.raise({
          type: 'scan_failures',
          message: `scan ${scan.id}: ${scan.failed} of ${scan.claimed} timeouts failed for good (see timeout_center.failed_timeouts)`,
          details: { scanId: scan.id, failed: scan.failed, claimed: scan.claimed, failures: scan.failures },
        });
      }
    }
    if (anyFailed) {
      const n = this.config.alerts.consecutiveFailedScans;
      const streak = await consecutiveFailedScans(pool, n + 1);
      if (streak === n) {
        void this.alerter.raise({
          type: 'consecutive_failed_scans',
          message: `${n} scans in a row ended with failed timeouts: a handler or the orders' database may be broken`,
          details: { consecutive: n },
        });
      }
    }
  }

  private async checkLag(): Promise<void> {
    const now = Date.now();
    if (!lagCheckDue(now, this.lastLagCheckAt, this.lagCheckNotBefore, this.config.coordinator.lagCheckIntervalMs)) return;
    this.lastLagCheckAt = now;
    const { rows } = await this.deps.pool.query<{ kind: string; pending_due: number; in_flight: number; lag_s: number; paused: boolean }>(
      `SELECT kind, pending_due, in_flight, extract(epoch FROM oldest_lag)::float8 AS lag_s, paused FROM timeout_center.backlog`,
    );
    this.deps.metrics.backlog.reset();
    this.deps.metrics.oldestLag.reset();
    let worst: (typeof rows)[number] | undefined;
    for (const r of rows) {
      this.deps.metrics.backlog.set({ kind: r.kind, state: 'pending' }, r.pending_due);
      this.deps.metrics.backlog.set({ kind: r.kind, state: 'in_flight' }, r.in_flight);
      this.deps.metrics.oldestLag.set({ kind: r.kind }, r.lag_s);
      if (!worst || r.lag_s > worst.lag_s) worst = r;
    }
    const sla = this.config.alerts.lagSlaMs / 1000;
    if (worst && worst.lag_s > sla && now - this.lastLagAlertAt >= this.config.alerts.lagAlertEveryMs) {
      this.lastLagAlertAt = now;
      void this.alerter.raise({
        type: 'lag_sla',
        message: worst.paused
          ? `oldest due ${worst.kind} timeout is ${worst.lag_s.toFixed(1)} s late (SLA ${sla} s); backlog ${worst.pending_due} waiting: the kind is PAUSED (timeout-center resume ${worst.kind})`
          : `oldest due ${worst.kind} timeout is ${worst.lag_s.toFixed(1)} s late (SLA ${sla} s); backlog ${worst.pending_due} waiting, ${worst.in_flight} in flight: add workers or look for a slow handler`,
        details: { kind: worst.kind, lagSeconds: worst.lag_s, slaSeconds: sla, pending: worst.pending_due, inFlight: worst.in_flight, paused: worst.paused },
      });
    }
  }

  /** The plan of a flood counted ahead, due untilMs from now: the lag check waits one interval
   *  past its instant (lag-schedule.ts). */
  private deferLagCheck(untilMs: number): void {
    this.lagCheckNotBefore = deferredUntil(Date.now(), untilMs, this.config.coordinator.lagCheckIntervalMs);
  }

  /** Backlog, lag and in-flight gauges are measured by the leader only: a standby must not keep
   *  exporting the values of its last term (dashboards take the max across coordinators). */
  private clearLeaderGauges(): void {
    this.deps.metrics.backlog.reset();
    this.deps.metrics.oldestLag.reset();
    this.deps.metrics.shardsInFlight.set(0);
  }

  /** Stops ticking and gives up leadership (the lock is released for a standby). Idempotent. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    await Promise.resolve(this.task?.destroy()).catch(() => {});
    this.task = undefined;
    await this.ticking?.catch(() => {});
    await this.deps.leadership.stop();
    this.deps.metrics.leader.set(0);
    this.clearLeaderGauges();
    this.flow.reset();
  }
}

interface Credit {
  rows: number;
  complete: boolean;
  /** The count's cutoff on the database clock (ms): rows due up to it were counted. */
  cutoff: number;
  /** When it was counted (this process's clock), for CREDIT_TTL_MS. */
  at: number;
}

/** The credit as plan_shards takes it ($7): {"kind": [rows, complete]}. */
function creditParam(credit: Map<string, Credit>): Record<string, [number, boolean]> {
  return Object.fromEntries([...credit].map(([kind, c]) => [kind, [c.rows, c.complete]]));
}

/** Whether a plan left nothing due uncovered: every kind's count (now, or the credit's) saw its
 *  last due row and all of it went into shards (the plan did not fill the room, so no kind was
 *  cut short). */
function coversAll(planned: PlannedScan, room: number): boolean {
  if (planned.shards.length >= room) return false;
  for (const k of planned.byKind.values()) if (!k.complete || k.planned < k.uncovered) return false;
  return true;
}

/** The cutoff up to which a covering plan covered the due rows: the earliest of its counts'. */
function coveredCutoff(planned: PlannedScan, credit: Map<string, Credit>, now: Date): Date {
  let cutoff = now.getTime();
  for (const [kind, k] of planned.byKind) if (!k.counted) cutoff = Math.min(cutoff, credit.get(kind)?.cutoff ?? cutoff);
  return new Date(cutoff);
}
