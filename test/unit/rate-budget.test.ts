// The leader's token buckets (src/flow/rate-budget.ts): refill at the rate on the database clock,
// capped at BURST_SECONDS, start empty, no saved-up burst after a quiet spell, a change of rate
// applies from the tick that reads it.
import { describe, expect, it } from 'vitest';
import { BURST_SECONDS, RateBudget, rateShardSize } from '../../src/flow/rate-budget.js';

const rates = (r: Record<string, number>) => new Map(Object.entries(r));

describe('RateBudget', () => {
  it('starts empty, refills at the rate, holds at most BURST_SECONDS worth', () => {
    const b = new RateBudget();
    expect(b.refill(rates({ k: 1000 }), 0)).toEqual({ k: 0 });
    expect(b.refill(rates({ k: 1000 }), 100)).toEqual({ k: 100 });
    b.spend(new Map([['k', 100]]));
    expect(b.refill(rates({ k: 1000 }), 150)).toEqual({ k: 50 });
    expect(b.refill(rates({ k: 1000 }), 5000)).toEqual({ k: 1000 * BURST_SECONDS });
  });

  it('plans at most the rate over time, whatever the tick timing', () => {
    const b = new RateBudget();
    let planned = 0;
    let t = 0;
    for (let i = 0; i < 1000; i += 1) {
      t += 20 + ((i * 37) % 90); // irregular ticks, 20..109 ms
      const budget = b.refill(rates({ k: 500 }), t)['k']!;
      const shard = rateShardSize(500);
      const n = Math.floor(budget / shard) * shard;
      planned += n;
      b.spend(new Map([['k', n]]));
    }
    expect(planned).toBeLessThanOrEqual((500 * t) / 1000);
    expect(planned).toBeGreaterThan((500 * t) / 1000 - 2 * rateShardSize(500));
  });

  it('keeps no burst for a kind that had nothing due', () => {
    const b = new RateBudget();
    b.refill(rates({ k: 1000 }), 0);
    for (let t = 1000; t <= 10_000; t += 1000) b.refill(rates({ k: 1000 }), t, new Set(['k']));
    // Work arrives: the first tick that sees it offers one shard, then the bucket refills as usual.
    expect(b.refill(rates({ k: 1000 }), 11_000)).toEqual({ k: rateShardSize(1000) });
    b.spend(new Map([['k', rateShardSize(1000)]]));
    expect(b.refill(rates({ k: 1000 }), 11_050)).toEqual({ k: 50 });
  });

  it('applies a lowered rate at once, clipping what the bucket holds; forgets kinds no longer limited', () => {
    const b = new RateBudget();
    b.refill(rates({ k: 1000, j: 10 }), 0);
    expect(b.refill(rates({ k: 1000, j: 10 }), 400)).toEqual({ k: 400, j: 4 });
    expect(b.refill(rates({ k: 100 }), 400)).toEqual({ k: 100 * BURST_SECONDS });
    expect(b.refill(rates({}), 500)).toEqual({});
    expect(b.refill(rates({ k: 100 }), 600)).toEqual({ k: 0 }); // a new bucket starts empty
  });
});
