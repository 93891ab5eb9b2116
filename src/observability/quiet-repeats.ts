// A line that one outage repeats (a read, an ACK, a tick failing on the same Redis failover):
// logged at its level once per window, the repeats in between at debug with how many there were.
import type { Logger } from 'pino';

export class QuietRepeats {
  private lastAt = -Infinity;
  private repeats = 0;

  constructor(private readonly windowMs = 10_000) {}

  /** Logs `msg` at `level` unless it was logged within the window; then at debug. */
  log(logger: Logger, level: 'warn' | 'error', fields: Record<string, unknown>, msg: string): void {
    const now = performance.now();
    if (now - this.lastAt < this.windowMs) {
      this.repeats += 1;
      logger.debug({ ...fields, repeats: this.repeats }, msg);
      return;
    }
    logger[level]({ ...fields, ...(this.repeats > 0 ? { repeatedBefore: this.repeats } : {}) }, msg);
    this.lastAt = now;
    this.repeats = 0;
  }
}
