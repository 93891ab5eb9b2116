// BulkHistogram must expose exactly what prom-client's Histogram exposes for the same
// observations: dashboards and alerts read tc_lateness_seconds as an ordinary histogram.
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BulkHistogram } from '../../src/observability/bulk-histogram.js';

const buckets = [0.05, 0.1, 0.25, 0.5, 1, 2, 5];

describe('BulkHistogram', () => {
  it('exposes the same text as prom-client for the same observations', async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const bulk = new BulkHistogram({ name: 'lateness_seconds', help: 'h', labelNames: ['kind'] as const, buckets, registers: [ours] });
    const reference = new Histogram({ name: 'lateness_seconds', help: 'h', labelNames: ['kind'] as const, buckets, registers: [theirs] });
    const ms = [0, 12, 50, 51, 100, 250, 499, 500, 1000, 1999, 7000, -3];
    bulk.observeMany({ kind: 'order.unpaid' }, ms, 0.001);
    bulk.observeMany({ kind: 'order.unpaid' }, [300], 0.001);
    bulk.observeMany({ kind: 'b' }, [0.2], 1);
    for (const v of [...ms, 300]) reference.observe({ kind: 'order.unpaid' }, Math.max(0, v) / 1000);
    reference.observe({ kind: 'b' }, 0.2);
    const text = async (r: Registry) =>
      (await r.metrics()).replace(/_sum\{([^}]*)\} ([0-9.e-]+)/g, (_, l: string, v: string) => `_sum{${l}} ${Number(v).toFixed(9)}`);
    expect(await text(ours)).toBe(await text(theirs));
  });

  it('counts a value `times` times: the same text as observing it that many times', async () => {
    const weighted = new Registry();
    const repeated = new Registry();
    const a = new BulkHistogram({ name: 'lateness_seconds', help: 'h', labelNames: ['kind'] as const, buckets, registers: [weighted] });
    const b = new BulkHistogram({ name: 'lateness_seconds', help: 'h', labelNames: ['kind'] as const, buckets, registers: [repeated] });
    // A shard's lateness per distinct due time (claim.sql's batch form): 3 rows 12 ms late, 20,000
    // 900 ms late, 2 rows 7 s late, none at -3 ms.
    a.observeMany({ kind: 'k' }, [0.012, 0.9, 7, -0.003], 1, [3, 20_000, 2, 0]);
    b.observeMany({ kind: 'k' }, [...Array(3).fill(0.012), ...Array(20_000).fill(0.9), 7, 7]);
    const text = async (r: Registry) =>
      (await r.metrics()).replace(/_sum\{([^}]*)\} ([0-9.e-]+)/g, (_, l: string, v: string) => `_sum{${l}} ${Number(v).toFixed(6)}`);
    expect(await text(weighted)).toBe(await text(repeated));
    expect(() => a.observeMany({ kind: 'k' }, [1, 2], 1, [1])).toThrow(/2 values but 1 counts/);
    expect(() => a.observeMany({ kind: 'k' }, [1, 1], 1, [1, 1.5])).toThrow(/not a count/);
    // A call that throws adds nothing.
    expect(await text(weighted)).toBe(await text(repeated));
  });

  it('rejects a value that is not a finite number, and reset() clears every series', async () => {
    const registry = new Registry();
    const bulk = new BulkHistogram({ name: 'x_seconds', help: 'h', labelNames: ['kind'] as const, buckets, registers: [registry] });
    expect(() => bulk.observeMany({ kind: 'a' }, [1, Number.NaN])).toThrow(/not a finite number/);
    bulk.observeMany({ kind: 'a' }, [1]);
    registry.resetMetrics();
    expect(await registry.metrics()).not.toContain('kind="a"');
  });
});
