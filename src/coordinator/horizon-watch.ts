// The vacuum horizon watch, one of the leader's duties (River's maintenance services): every
// coordinator.horizonCheckIntervalMs it reads what holds back VACUUM in each database its leader
// answers for (operations/vacuum-horizon.ts): the center's leader the center's database and each
// business database that is not a store; a store's leader its store. It exports the
// tc_vacuum_horizon_* gauges and raises vacuum_horizon once per holder when the holder passes the
// warning (alerts.vacuumHorizonMs / vacuumHorizonXids) and once more if it turns critical.
//
// It needs only what a monitoring role has (pg_monitor); without pg_read_all_stats other roles'
// sessions are hidden, which tc_vacuum_horizon_sees_all_sessions says (0) and the log names once.
// A database that does not answer loses its series until it answers again (its own watch, or the
// store watch, reports it down).
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Alerter } from '../alerts/alerter.js';
import { createPool } from '../db/pool.js';
import type { Metrics } from '../observability/metrics.js';
import { QuietRepeats } from '../observability/quiet-repeats.js';
import {
  blindMessage,
  horizonMessage,
  horizonSeverity,
  oldestByKind,
  readHorizon,
  type HorizonHolder,
  type HorizonLimits,
  type HorizonReading,
} from '../operations/vacuum-horizon.js';
import { BaseService } from '../service.js';

/** A database to watch: a pool the process already has, or a URL it opens a small pool for. */
export type WatchedDatabase = { name: string; pool: pg.Pool } | { name: string; url: string };

export interface HorizonWatchOptions {
  databases: WatchedDatabase[];
  metrics: Metrics;
  alerter: Alerter;
  logger: Logger;
  limits: HorizonLimits;
  everyMs: number;
}

type Labels = Record<string, string>;

/** The identity of a holder: one alert per holder, not per reading. */
const holderKey = (database: string, h: HorizonHolder): string =>
  [database, h.holder, h.pid ?? '', h.slot ?? '', h.gid ?? '', h.scope, h.xactStart?.getTime() ?? ''].join('|');

export class HorizonWatch extends BaseService {
  readonly name = 'vacuum horizon watch';
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private pools = new Map<string, { pool: pg.Pool; owned: boolean }>();
  /** Series set per database, to remove what the next reading no longer has. */
  private series = new Map<string, { ages: Labels[]; info: Labels[] }>();
  /** Holders alerted, with the severity alerted at. */
  private alerted = new Map<string, 'warning' | 'critical'>();
  private blindLogged = new Set<string>();
  private readonly failures = new QuietRepeats(60_000);

  constructor(private readonly options: HorizonWatchOptions) {
    super();
  }

  protected async onStart(): Promise<void> {
    for (const d of this.options.databases) {
      if ('pool' in d) this.pools.set(d.name, { pool: d.pool, owned: false });
      else {
        this.pools.set(d.name, {
          owned: true,
          pool: createPool({
            connectionString: d.url,
            max: 1,
            applicationName: 'timeout-center horizon watch',
            logger: this.options.logger.child({ database: d.name }),
            connectionTimeoutMs: 5000,
            statementTimeoutMs: 10_000,
            silentAfterMs: 15_000,
          }),
        });
      }
    }
    // The first reading right away: a new leader shows the horizon without waiting an interval.
    this.running = this.checkAll().finally(() => (this.running = undefined));
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.checkAll().finally(() => (this.running = undefined));
    }, this.options.everyMs);
    this.timer.unref();
  }

  protected async onStop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
    for (const name of [...this.series.keys()]) this.clear(name);
    this.alerted.clear();
    this.blindLogged.clear();
    const owned = [...this.pools.values()].filter((p) => p.owned);
    this.pools.clear();
    await Promise.all(owned.map((p) => p.pool.end().catch(() => {})));
  }

  /** Reads every database once (in parallel; one failing does not stop the others). */
  async checkAll(): Promise<void> {
    await Promise.all(
      [...this.pools].map(async ([name, { pool }]) => {
        try {
          this.show(name, await readHorizon(pool));
        } catch (err) {
          this.clear(name);
          this.failures.log(this.options.logger, 'warn', { err, database: name }, `could not read the vacuum horizon of ${name}; the next check retries`);
        }
      }),
    );
  }

  private clear(database: string): void {
    const { metrics } = this.options;
    const shown = this.series.get(database);
    if (shown) {
      for (const l of shown.ages) {
        metrics.horizonAgeXids.remove(l);
        metrics.horizonAgeSeconds.remove(l);
      }
      for (const l of shown.info) metrics.horizonHolder.remove(l);
    }
    metrics.horizonSeesAll.remove({ database });
    this.series.delete(database);
  }

  private show(database: string, reading: HorizonReading): void {
    const { metrics, limits, logger } = this.options;
    this.clear(database);
    const ages: Labels[] = [];
    const info: Labels[] = [];
    metrics.horizonSeesAll.set({ database }, reading.seesAllSessions ? 1 : 0);
    if (!reading.seesAllSessions && !this.blindLogged.has(database)) {
      this.blindLogged.add(database);
      logger.warn({ database, role: reading.role }, blindMessage(database, reading));
    }
    for (const h of oldestByKind(reading.holders)) {
      const id = {
        database,
        holder: h.holder,
        pid: h.pid === null ? '' : String(h.pid),
        application_name: h.applicationName ?? '',
        slot: h.slot ?? '',
        gid: h.gid ?? '',
      };
      metrics.horizonAgeXids.set(id, h.xidAge);
      if (h.seconds !== null) metrics.horizonAgeSeconds.set(id, h.seconds);
      const detail = {
        ...id,
        state: h.state ?? '',
        xact_start: h.xactStart?.toISOString() ?? '',
        query_start: h.queryStart?.toISOString() ?? '',
      };
      metrics.horizonHolder.set(detail, 1);
      ages.push(id);
      info.push(detail);
    }
    this.series.set(database, { ages, info });
    // One alert per holder when it passes the warning, one more if it turns critical.
    const seen = new Set<string>();
    for (const h of reading.holders) {
      const severity = horizonSeverity(h, limits);
      if (!severity) continue;
      const key = holderKey(database, h);
      seen.add(key);
      const before = this.alerted.get(key);
      if (before === severity || before === 'critical') continue;
      this.alerted.set(key, severity);
      void this.options.alerter.raise({
        type: 'vacuum_horizon',
        message: horizonMessage(database, h),
        details: {
          database,
          severity,
          holder: h.holder,
          pid: h.pid,
          applicationName: h.applicationName,
          state: h.state,
          slot: h.slot,
          gid: h.gid,
          xidAge: h.xidAge,
          seconds: h.seconds,
          query: h.query,
        },
      });
    }
    for (const key of [...this.alerted.keys()]) if (key.startsWith(`${database}|`) && !seen.has(key)) this.alerted.delete(key);
  }
}
