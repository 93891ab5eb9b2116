// Alerts go to the log at error level and, when configured, to a webhook as one JSON POST each.
// A failing webhook is logged and never blocks the coordinator.
import type { Logger } from 'pino';
import type { AlertsConfig } from '../config.js';
import type { Metrics } from '../observability/metrics.js';

export type AlertType =
  | 'scan_failures'
  | 'consecutive_failed_scans'
  | 'lag_sla'
  | 'shard_abandoned'
  | 'circuit_open'
  | 'circuit_closed'
  | 'kind_unserved'
  | 'kind_served'
  | 'store_unreachable'
  | 'store_reachable'
  | 'vacuum_horizon'
  | 'timeouts_stranded';

export interface Alert {
  type: AlertType;
  message: string;
  details: Record<string, unknown>;
}

export interface AlertSink {
  send(alert: Alert & { at: string; source: string }): Promise<void>;
}

export class LogSink implements AlertSink {
  constructor(private readonly logger: Logger) {}
  async send(alert: Alert & { at: string; source: string }): Promise<void> {
    this.logger.error({ alert: alert.type, ...alert.details }, `ALERT ${alert.type}: ${alert.message}`);
  }
}

export class WebhookSink implements AlertSink {
  constructor(
    private readonly url: string,
    private readonly timeoutMs: number,
  ) {}
  async send(alert: Alert & { at: string; source: string }): Promise<void> {
    const res = await fetch(this.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(alert),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    if (!res.ok) throw new Error(`webhook ${this.url} answered ${res.status} ${res.statusText}`);
  }
}

export class Alerter {
  private readonly sinks: AlertSink[];

  constructor(
    config: AlertsConfig,
    private readonly logger: Logger,
    private readonly metrics: Metrics,
    private readonly source: string,
  ) {
    this.sinks = [new LogSink(logger)];
    if (config.webhookUrl) this.sinks.push(new WebhookSink(config.webhookUrl, config.webhookTimeoutMs));
  }

  /** Fire and forget: resolves once every sink has answered or failed. */
  async raise(alert: Alert): Promise<void> {
    this.metrics.alerts.inc({ type: alert.type });
    const full = { ...alert, at: new Date().toISOString(), source: this.source };
    await Promise.all(
      this.sinks.map((sink) =>
        sink.send(full).catch((err: unknown) => {
          this.logger.warn({ err, alert: alert.type }, 'alert sink failed');
        }),
      ),
    );
  }
}
