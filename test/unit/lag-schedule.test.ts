// The lag check's schedule (src/coordinator/lag-schedule.ts): every interval, put off by a flood
// mapped ahead of its instant, but never frozen by a stream of them.
import { describe, expect, it } from 'vitest';
import { deferredUntil, lagCheckDue } from '../../src/coordinator/lag-schedule.js';

const I = 5000;

describe('lag check schedule', () => {
  it('runs once per interval when nothing defers it', () => {
    expect(lagCheckDue(10_000, 6_000, 0, I)).toBe(false);
    expect(lagCheckDue(11_000, 6_000, 0, I)).toBe(true);
  });

  it('a flood mapped ahead puts it off to one interval after the flood instant', () => {
    const notBefore = deferredUntil(10_000, 500, I); // instant at 10,500
    expect(notBefore).toBe(15_500);
    expect(lagCheckDue(11_000, 6_000, notBefore, I)).toBe(false);
    expect(lagCheckDue(15_499, 6_000, notBefore, I)).toBe(false);
    expect(lagCheckDue(15_500, 6_000, notBefore, I)).toBe(true);
  });

  it('a stream of instants, each mapped ahead, holds it back at most two intervals since the last one', () => {
    let last = 0;
    let notBefore = 0;
    const runs: number[] = [];
    // An instant mapped ahead every 200 ms, 100 ms before it; the coordinator ticks every 20 ms.
    for (let now = 1; now <= 60_000; now += 20) {
      if (now % 200 === 1) notBefore = deferredUntil(now, 100, I);
      if (lagCheckDue(now, last, notBefore, I)) {
        runs.push(now);
        last = now;
      }
    }
    expect(runs.length).toBeGreaterThanOrEqual(5);
    for (let i = 1; i < runs.length; i++) expect(runs[i]! - runs[i - 1]!).toBeLessThanOrEqual(2 * I + 20);
  });
});
