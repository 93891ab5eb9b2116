// A Prometheus histogram that takes a shard's observations in one call. prom-client's Histogram
// hashes and validates its labels on every observe (about 100 ns): for a worker closing thousands
// of timeouts per shard that was a tenth of its CPU in a flood, on the same cores as the claims.
// Here a shard's values are counted into buckets in a plain loop and added once. The exposition
// is prom-client's own (the registry formats what get() returns), so the series read the same.
import type { Metric, Registry } from 'prom-client';

/** One sample as prom-client's registry formats it. */
interface Sample {
  labels: Record<string, string | number>;
  value: number;
  metricName: string;
}

interface Series<L extends string> {
  labels: Record<L, string>;
  /** Observations per bucket (not cumulative); the last one is +Inf. */
  counts: Float64Array;
  sum: number;
  count: number;
}

export class BulkHistogram<L extends string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly name: string;
  readonly help: string;
  /** Read by tools that list a registry's label names (prom-client keeps them on the instance too). */
  readonly labelNames: readonly L[];
  private readonly buckets: number[];
  private readonly series = new Map<string, Series<L>>();

  constructor(options: { name: string; help: string; labelNames: readonly L[]; buckets: number[]; registers: Registry[] }) {
    this.name = options.name;
    this.help = options.help;
    this.labelNames = [...options.labelNames];
    this.buckets = [...options.buckets].sort((a, b) => a - b);
    // The registry only reads name, help, type, aggregator, get() and reset() of a metric.
    for (const r of options.registers) r.registerMetric(this as unknown as Metric<L>);
  }

  /**
   * Adds observations: each value times `scale` (e.g. 0.001 for milliseconds to seconds), negative
   * ones counted as 0 (clock skew between PostgreSQL sessions). `times`, when given, says how many
   * observations each value stands for (a shard's lateness per distinct due time: claim.sql).
   */
  observeMany(labels: Record<L, string>, values: ArrayLike<number>, scale = 1, times?: ArrayLike<number>): void {
    if (values.length === 0) return;
    if (times && times.length !== values.length) throw new RangeError(`${this.name}: ${values.length} values but ${times.length} counts`);
    // Bounds in the values' own unit: one multiplication per bucket, not per value.
    const bounds = this.buckets.map((b) => b / scale);
    // Counted apart first: a bad value throws before the series changes.
    const added = new Float64Array(this.buckets.length + 1);
    let sum = 0;
    let count = 0;
    for (let i = 0; i < values.length; i += 1) {
      const v = Math.max(0, values[i]!);
      if (!Number.isFinite(v)) throw new TypeError(`${this.name}: not a finite number: ${String(values[i])}`);
      const n = times ? times[i]! : 1;
      if (!Number.isInteger(n) || n < 0) throw new TypeError(`${this.name}: not a count: ${String(n)}`);
      let b = 0;
      while (b < bounds.length && v > bounds[b]!) b += 1;
      added[b]! += n;
      sum += v * n;
      count += n;
    }
    const key = JSON.stringify(labels);
    let s = this.series.get(key);
    if (!s) {
      s = { labels: { ...labels }, counts: new Float64Array(this.buckets.length + 1), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    for (let b = 0; b < added.length; b += 1) s.counts[b]! += added[b]!;
    s.sum += sum * scale;
    s.count += count;
  }

  async get(): Promise<{ name: string; help: string; type: 'histogram'; values: Sample[]; aggregator: 'sum' }> {
    const values: Sample[] = [];
    for (const s of this.series.values()) {
      let cumulative = 0;
      this.buckets.forEach((bound, i) => {
        cumulative += s.counts[i]!;
        values.push({ labels: { le: bound, ...s.labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${this.name}_bucket` });
      values.push({ labels: { ...s.labels }, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { ...s.labels }, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset(): void {
    this.series.clear();
  }
}
