// The map's memory between ticks (src/coordinator/plan-memory.ts), rule by rule, on a clock the
// test moves: credit, coverage, counted ahead, planned ahead, and reset.
import { beforeEach, describe, expect, it } from 'vitest';
import type { PlannedScan } from '../../src/coordinator/map.js';
import { COVERED_TTL_MS, CREDIT_TTL_MS, PlanMemory, creditParam } from '../../src/coordinator/plan-memory.js';

const SHARD = 100;
let local = 1_000_000;
let memory: PlanMemory;

function plan(byKind: Record<string, { uncovered: number; planned: number; counted?: boolean; complete?: boolean }>, shards = 1): PlannedScan {
  return {
    scanId: 1,
    capacity: 0,
    shards: Array.from({ length: shards }, (_, i) => ({ shardId: i + 1, kind: 'a', scanId: 1 })),
    byKind: new Map(Object.entries(byKind).map(([k, v]) => [k, { counted: true, complete: true, ...v }])),
    byTarget: new Map(),
  } as unknown as PlannedScan;
}

beforeEach(() => {
  local = 1_000_000;
  memory = new PlanMemory(
    () => SHARD,
    () => local,
  );
});

describe('credit', () => {
  it('keeps what a plan counted but did not cover, for CREDIT_TTL_MS, while a full shard is left', () => {
    const db = 5000;
    memory.afterPlan(plan({ a: { uncovered: 350, planned: 200 }, b: { uncovered: 150, planned: 100 } }), new Map(), db, 10);
    const usable = memory.usableCredit(db + 10);
    expect(creditParam(usable)).toEqual({ a: [150, true] }); // b: 50 left, less than a shard
    local += CREDIT_TTL_MS;
    expect(memory.usableCredit(db + 20).size).toBe(0);
  });

  it('a plan from credit keeps the credit its count was taken at (cutoff and age)', () => {
    memory.afterPlan(plan({ a: { uncovered: 500, planned: 100 } }), new Map(), 5000, 10);
    const used = memory.usableCredit(5000);
    local += 600;
    memory.afterPlan(plan({ a: { uncovered: 400, planned: 100, counted: false } }), used, 6000, 10);
    const again = memory.usableCredit(6000);
    expect(again.get('a')).toMatchObject({ rows: 300, cutoff: 5000, at: 1_000_000 });
    local += 400; // CREDIT_TTL_MS after the first count, not after the second plan
    expect(memory.usableCredit(6000).size).toBe(0);
  });
});

describe('coverage', () => {
  it('a tick with nothing to plan covers the due rows up to its cutoff, until something newer is due or the TTL', () => {
    memory.afterPlan(undefined, new Map(), 5000, 10);
    expect(memory.isCovered(5000, false)).toBe(true);
    expect(memory.isCovered(null, false)).toBe(true);
    expect(memory.isCovered(5001, false), 'a row due after the count').toBe(false);
    expect(memory.isCovered(4000, true), 'a capped or rate-limited kind').toBe(false);
    local += COVERED_TTL_MS;
    expect(memory.isCovered(4000, false)).toBe(false);
  });

  it('a plan covers only when every kind saw its last due row and all of it fit the room', () => {
    memory.afterPlan(plan({ a: { uncovered: 200, planned: 200 } }, 2), new Map(), 5000, 10);
    expect(memory.isCovered(5000, false)).toBe(true);
    memory.afterPlan(plan({ a: { uncovered: 200, planned: 200, complete: false } }, 2), new Map(), 5000, 10);
    expect(memory.isCovered(5000, false), 'the count stopped short').toBe(false);
    memory.afterPlan(plan({ a: { uncovered: 200, planned: 200 } }, 2), new Map(), 5000, 2);
    expect(memory.isCovered(5000, false), 'the room was full').toBe(false);
  });

  it('covers up to the earliest cutoff of the counts a plan used', () => {
    memory.countedAhead(4000, new Map([['a', { uncovered: 300, complete: true }]]));
    const used = memory.usableCredit(5000);
    memory.afterPlan(plan({ a: { uncovered: 300, planned: 300, counted: false } }, 3), used, 5000, 10);
    expect(memory.isCovered(4000, false)).toBe(true);
    expect(memory.isCovered(4500, false)).toBe(false);
  });

  it('nothing in flight forgets coverage', () => {
    memory.afterPlan(undefined, new Map(), 5000, 10);
    memory.nothingInFlight();
    expect(memory.isCovered(5000, false)).toBe(false);
  });
});

describe('counted ahead', () => {
  it('counts an instant once; its credit is usable only once the database clock reaches it', () => {
    expect(memory.claimCountAhead(9000)).toBe(true);
    expect(memory.claimCountAhead(9000)).toBe(false);
    memory.countedAhead(9000, new Map([['a', { uncovered: 250, complete: true }]]));
    expect(memory.usableCredit(8999).size).toBe(0);
    expect(creditParam(memory.usableCredit(9000))).toEqual({ a: [250, true] });
    expect(memory.usedCountAhead(memory.usableCredit(9000))).toBe(true);
    expect(memory.claimCountAhead(9500)).toBe(true);
  });

  it('maps ahead only an instant of two shards or more per kind', () => {
    memory.claimCountAhead(9000);
    memory.countedAhead(
      9000,
      new Map([
        ['a', { uncovered: 2 * SHARD, complete: true }],
        ['b', { uncovered: SHARD, complete: true }],
      ]),
    );
    const ahead = memory.creditToPlanAhead();
    expect(ahead?.cutoff).toBe(9000);
    expect([...(ahead?.credit.keys() ?? [])]).toEqual(['a']);
  });
});

describe('planned ahead', () => {
  it('the plan at the instant takes the kinds planned ahead as covered, until something newer is due or the TTL', () => {
    memory.claimCountAhead(9000);
    memory.countedAhead(9000, new Map([['a', { uncovered: 300, complete: true }]]));
    const { credit } = memory.creditToPlanAhead()!;
    memory.plannedAheadOf(9000, plan({ a: { uncovered: 300, planned: 300, counted: false } }), credit);
    expect(memory.plannedAheadCredit(8999, null), 'before the instant').toEqual({});
    expect(memory.plannedAheadCredit(9000, 9000)).toEqual({ a: [0, true] });
    expect(memory.plannedAheadCredit(9000, 9001), 'a row due after the instant').toEqual({});
    expect(memory.plannedAheadCredit(9000, 9000), 'forgotten once something newer was due').toEqual({});
  });

  it('expires after COVERED_TTL_MS, and a kind with credit left is counted as usual', () => {
    memory.claimCountAhead(9000);
    memory.countedAhead(9000, new Map([['a', { uncovered: 500, complete: true }]]));
    const { credit } = memory.creditToPlanAhead()!;
    memory.plannedAheadOf(9000, plan({ a: { uncovered: 500, planned: 300, counted: false } }), credit);
    expect(memory.plannedAheadCredit(9000, 9000), 'a has 200 rows of credit left').toEqual({});
    memory.plannedAheadOf(9000, plan({ a: { uncovered: 300, planned: 300, counted: false } }), credit);
    local += COVERED_TTL_MS;
    expect(memory.plannedAheadCredit(9000, 9000)).toEqual({});
  });
});

describe('reset', () => {
  it('forgets credit, coverage, the count ahead and the plan ahead', () => {
    memory.claimCountAhead(9000);
    memory.countedAhead(9000, new Map([['a', { uncovered: 300, complete: true }]]));
    memory.plannedAheadOf(9000, plan({ a: { uncovered: 300, planned: 300, counted: false } }), memory.creditToPlanAhead()!.credit);
    memory.afterPlan(undefined, new Map(), 9000, 10);
    memory.reset();
    expect(memory.usableCredit(9000).size).toBe(0);
    expect(memory.isCovered(9000, false)).toBe(false);
    expect(memory.plannedAheadCredit(9000, 9000)).toEqual({});
    expect(memory.claimCountAhead(9000), 'counts the instant again').toBe(true);
  });
});
