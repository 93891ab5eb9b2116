// Kinds no live worker serves while they have work (next_due.sql's unserved; sql/0013): their
// shards wait for a worker and are left out of the map's bound, so the other kinds go on. The
// leader says so once when a kind becomes unserved (a warning and the kind_unserved alert: what to
// do) and once when a worker serves it again (kind_served); a new leader says it again.
import type { Logger } from 'pino';
import type { Alerter } from '../alerts/alerter.js';

export class UnservedKinds {
  private known = new Set<string>();

  constructor(
    private readonly alerter: Alerter,
    private readonly logger: Logger,
  ) {}

  /** The kinds unserved at this tick. */
  update(unserved: readonly string[]): void {
    const now = new Set(unserved);
    for (const kind of now) {
      if (this.known.has(kind)) continue;
      const message = `no live worker serves ${kind} (none seen in the last 15 s with it in its kinds): its timeouts wait, one shard at most, and the other kinds go on. Start a worker that serves ${kind} (worker.kinds), or pause it (timeout-center pause ${kind})`;
      this.logger.warn({ kind }, message);
      void this.alerter.raise({ type: 'kind_unserved', message, details: { kind } });
    }
    for (const kind of this.known) {
      if (now.has(kind)) continue;
      const message = `a live worker serves ${kind} again (or it was paused, or has nothing waiting)`;
      this.logger.info({ kind }, message);
      void this.alerter.raise({ type: 'kind_served', message, details: { kind } });
    }
    this.known = now;
  }

  /** Leadership changed hands: the next leader reports what it finds. */
  reset(): void {
    this.known = new Set();
  }
}
