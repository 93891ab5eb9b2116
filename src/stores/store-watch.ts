// Whether a store's database answers (docs/scale.md): every coordinator process probes each store
// it competes for, exports tc_store_up{store}, and raises store_unreachable once the store has not
// answered for alerts.storeDownMs, then store_reachable when it answers again. A store's leader
// cannot say this itself (a store that is down has no leader: its epoch cannot be bumped), and
// every coordinator sees the same outage, so the alert is raised by whichever process first sets
// a Redis key for it: one alert per outage for the fleet, not one per coordinator.
import type { Cluster, Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Alerter } from '../alerts/alerter.js';
import type { Metrics } from '../observability/metrics.js';
import { redactDbUrl } from '../worker/business-db.js';
import { periodic, service, type Service } from '../service.js';

export interface StoreWatchOptions {
  store: string;
  url: string;
  pool: pg.Pool;
  redis: Redis | Cluster;
  /** The Redis key that makes one process the one to alert (per store). */
  alertKey: string;
  alerter: Alerter;
  metrics: Metrics;
  logger: Logger;
  /** How long the store may not answer before the alert (alerts.storeDownMs). */
  downAfterMs: number;
  everyMs: number;
}

export class StoreWatch {
  private downSince: number | undefined;
  private lastError = '';

  constructor(private readonly o: StoreWatchOptions) {}

  /** The periodic probe, as a service of the store's coordinator; the first probe at start, so
   *  tc_store_up has its series from the first second. */
  service(): Service {
    const onError = (err: unknown) => this.o.logger.warn({ err }, 'store probe failed');
    const rounds = periodic(`store watch ${this.o.store}`, this.o.everyMs, () => this.probe(), onError);
    let first: Promise<void> | undefined;
    return service(
      `store watch ${this.o.store}`,
      async () => {
        await rounds.start();
        first = this.probe().catch(onError);
      },
      async () => {
        await rounds.stop();
        await first;
      },
    );
  }

  async probe(): Promise<void> {
    const { store, metrics } = this.o;
    try {
      await this.o.pool.query('SELECT 1');
    } catch (err) {
      metrics.storeUp.set({ store }, 0);
      this.lastError = (err as Error).message;
      this.downSince ??= Date.now();
      const downMs = Date.now() - this.downSince;
      // The key lives as long as the outage is alerted: set once per outage by one process.
      if (downMs >= this.o.downAfterMs && (await this.claim('down'))) {
        await this.o.alerter.raise({
          type: 'store_unreachable',
          message: `store ${store} (${redactDbUrl(this.o.url)}) does not answer for ${Math.round(downMs / 1000)} s: its timeouts wait, the other stores go on. Start it or check businessDatabases.${store}: ${this.lastError}`,
          details: { store, downMs, error: this.lastError },
        });
      }
      return;
    }
    metrics.storeUp.set({ store }, 1);
    // Whoever sees the store answer ends an alerted outage, even a process that started during it
    // (the one that alerted may be gone): the key would otherwise silence the next outage.
    const downMs = this.downSince === undefined ? undefined : Date.now() - this.downSince;
    this.downSince = undefined;
    if (await this.claim('up')) {
      await this.o.alerter.raise({
        type: 'store_reachable',
        message: `store ${store} answers again${downMs === undefined ? '' : ` after about ${Math.round(downMs / 1000)} s`}; its leader resumes its timeouts`,
        details: { store, downMs },
      });
    }
  }

  /** True for the one process that moves the store's alert state to `to` (down: not yet alerted;
   *  up: alerted as down). Redis down: no alert from here (the log and tc_store_up still say it). */
  private async claim(to: 'down' | 'up'): Promise<boolean> {
    try {
      if (to === 'down') return (await this.o.redis.set(this.o.alertKey, 'down', 'PX', 24 * 3_600_000, 'NX')) === 'OK';
      return (await this.o.redis.del(this.o.alertKey)) === 1;
    } catch (err) {
      this.o.logger.warn({ err }, `could not reach Redis to coordinate the store ${this.o.store} alert`);
      return false;
    }
  }
}
