// The lag monitor, last in every leader tick: every lagCheckIntervalMs it reads the backlog view
// into the backlog and lag gauges, and raises lag_sla when the oldest due timeout is later than
// the SLA. A flood mapped ahead puts the check off past its instant (lag-schedule.ts): nothing of
// it is late yet, and the check would read every due row while the first shards claim. The gauges
// are the leader's only: a standby must not keep exporting its last term's values.
import type pg from 'pg';
import type { Alerter } from '../alerts/alerter.js';
import type { AlertsConfig } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { deferredUntil, lagCheckDue } from './lag-schedule.js';
import { sql } from '../db/queries.js';
import { ClaimFloors } from './claim-floors.js';
import { readStranded, STRANDED_ADVICE, type Stranded } from '../operations/stranded.js';

interface BacklogRow {
  kind: string;
  pending_due: number;
  in_flight: number;
  lag_s: number;
  paused: boolean;
}

export class LagMonitor {
  private lastCheckAt = 0;
  private notBefore = 0;
  private lastAlertAt = 0;
  private lastStrandedAlertAt = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly alerter: Alerter,
    private readonly metrics: Metrics,
    private readonly alerts: AlertsConfig,
    private readonly intervalMs: number,
    /** The store this monitor's leader leads (`center` for the center's database). */
    private readonly store: string = 'center',
    /** The map's claim floors (claim-floors.ts): the count of due rows reads from them. */
    private readonly floors: ClaimFloors = new ClaimFloors(),
  ) {}

  /** Kinds whose backlog and lag series this monitor set last. */
  private shown = new Set<string>();
  /** Kinds whose stranded series this monitor set last. */
  private strandedShown = new Set<string>();

  /** Removes this store's backlog and lag series (other stores' leaders in this process keep theirs). */
  private clearOwn(): void {
    for (const kind of this.shown) {
      for (const state of ['pending', 'in_flight']) this.metrics.backlog.remove({ store: this.store, kind, state });
      this.metrics.oldestLag.remove({ store: this.store, kind });
    }
    this.shown.clear();
    for (const kind of this.strandedShown) this.metrics.stranded.remove({ store: this.store, kind });
    this.strandedShown.clear();
  }

  /** A flood due untilMs from now was mapped ahead: check one interval past its instant. */
  deferFor(untilMs: number): void {
    this.notBefore = deferredUntil(Date.now(), untilMs, this.intervalMs);
  }

  /** Each kind's backlog, one statement per kind from its floor and the shards in flight
   *  (backlog.sql): the kinds with something due or in flight. */
  private async backlog(): Promise<BacklogRow[]> {
    const { rows: kinds } = await this.pool.query<{ kind: string }>(sql('flow/kind_names'));
    const rows: BacklogRow[] = [];
    for (const { kind } of kinds) {
      const floor = this.floors.floorOf(kind);
      const { rows: found } = await this.pool.query<BacklogRow>(
        sql('coordinator/backlog', { kind, floorAt: floor?.[0] ?? null, floorId: floor?.[1] ?? '0', shardsFrom: this.floors.shardsFrom() }),
      );
      rows.push(...found);
    }
    return rows;
  }

  async check(): Promise<void> {
    const now = Date.now();
    if (!lagCheckDue(now, this.lastCheckAt, this.notBefore, this.intervalMs)) return;
    this.lastCheckAt = now;
    const rows = await this.backlog();
    const stranded = await readStranded(this.pool);
    this.clearOwn();
    this.reportStranded(now, stranded);
    let worst: (typeof rows)[number] | undefined;
    for (const r of rows) {
      this.shown.add(r.kind);
      this.metrics.backlog.set({ store: this.store, kind: r.kind, state: 'pending' }, r.pending_due);
      this.metrics.backlog.set({ store: this.store, kind: r.kind, state: 'in_flight' }, r.in_flight);
      this.metrics.oldestLag.set({ store: this.store, kind: r.kind }, r.lag_s);
      if (!worst || r.lag_s > worst.lag_s) worst = r;
    }
    const sla = this.alerts.lagSlaMs / 1000;
    if (worst && worst.lag_s > sla && now - this.lastAlertAt >= this.alerts.lagAlertEveryMs) {
      this.lastAlertAt = now;
      void this.alerter.raise({
        type: 'lag_sla',
        message: worst.paused
          ? `oldest due ${worst.kind} timeout is ${worst.lag_s.toFixed(1)} s late (SLA ${sla} s); backlog ${worst.pending_due} waiting: the kind is PAUSED (timeout-center resume ${worst.kind})`
          : `oldest due ${worst.kind} timeout is ${worst.lag_s.toFixed(1)} s late (SLA ${sla} s); backlog ${worst.pending_due} waiting, ${worst.in_flight} in flight: add workers or look for a slow handler`,
        details: {
          store: this.store,
          kind: worst.kind,
          lagSeconds: worst.lag_s,
          slaSeconds: sla,
          pending: worst.pending_due,
          inFlight: worst.in_flight,
          paused: worst.paused,
        },
      });
    }
  }

  /** Timeouts dispatched to a finished shard (stranded.sql): never applied by any run. A bug, not
   *  load: exported per kind and alerted (at most once per lagAlertEveryMs) with what to do. */
  private reportStranded(now: number, stranded: Stranded[]): void {
    for (const r of stranded) {
      this.strandedShown.add(r.kind);
      this.metrics.stranded.set({ store: this.store, kind: r.kind }, r.count);
    }
    const total = stranded.reduce((n, r) => n + r.count, 0);
    if (total === 0 || now - this.lastStrandedAlertAt < this.alerts.lagAlertEveryMs) return;
    this.lastStrandedAlertAt = now;
    const where = this.store === 'center' ? "the center's database" : `store ${this.store}`;
    void this.alerter.raise({
      type: 'timeouts_stranded',
      message: `${total} timeouts in ${where} (${stranded.map((r) => `${r.kind}: ${r.count}`).join(', ')}) ${STRANDED_ADVICE}`,
      details: { store: this.store, stranded: Object.fromEntries(stranded.map((r) => [r.kind, r.count])) },
    });
  }

  /** Off the lead: the backlog, lag and in-flight gauges go to zero (dashboards take the max
   *  across coordinators). */
  clearGauges(): void {
    this.clearOwn();
    this.metrics.shardsInFlight.set({ store: this.store }, 0);
  }
}
