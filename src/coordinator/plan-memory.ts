// What the leader's map remembers between ticks, so that it does not count the same due rows
// again: one object, reset whenever leadership changes hands (a new leader starts from nothing:
// its predecessor's shards may have covered anything). Every rule keys its time-to-live on an
// injected local clock; the cutoffs it compares are the database clock's (ms), as read by the tick.
//   credit        per kind, due rows a count found beyond the shards in flight that no shard covers
//                 yet (the room did not take them, or they were counted ahead of their instant).
//                 Only this leader's plans claim them, so the next plan uses the credit instead of
//                 counting again, for CREDIT_TTL_MS, and only while a full shard's worth is left.
//   coverage      a count found every due row covered by the shards in flight: ticks skip the count
//                 while nothing new has become due, for COVERED_TTL_MS.
//   counted ahead the due instant last counted ahead (count_ahead.sql): counted once.
//   planned ahead the kinds whose rows due by an instant went into shards written ahead of it: the
//                 plan at the instant takes them as covered.
import type { PlannedScan } from './map.js';

/** How long rows counted but not yet given shards are trusted before the map counts again. */
export const CREDIT_TTL_MS = 1000;
/** How long "every due row is covered by shards in flight" is trusted without a new count. */
export const COVERED_TTL_MS = 5000;

export interface Credit {
  rows: number;
  complete: boolean;
  /** The count's cutoff on the database clock (ms): rows due up to it were counted. */
  cutoff: number;
  /** When it was counted (the injected clock), for CREDIT_TTL_MS. */
  at: number;
}

/** The credit as plan_shards takes it ($7): {"kind": [rows, complete]}. */
export function creditParam(credit: Map<string, Credit>): Record<string, [number, boolean]> {
  return Object.fromEntries([...credit].map(([kind, c]) => [kind, [c.rows, c.complete]]));
}

export class PlanMemory {
  private credit = new Map<string, Credit>();
  private coveredAt: { cutoff: number; at: number } | undefined;
  private countedAheadFor: number | undefined;
  private plannedAhead: { cutoff: number; kinds: Set<string>; at: number } | undefined;

  constructor(
    /** Rows per shard of each kind: less credit than one shard is not trusted. */
    private readonly shardSize: (kind: string) => number,
    /** Local milliseconds, for the time-to-live rules (Date.now in production). */
    private readonly clock: () => number = Date.now,
  ) {}

  /** Forgets everything: on election and on deposition. */
  reset(): void {
    this.credit.clear();
    this.coveredAt = undefined;
    this.countedAheadFor = undefined;
    this.plannedAhead = undefined;
  }

  /** Nothing in flight: nothing can be covered by shards in flight, or planned ahead and pending. */
  nothingInFlight(): void {
    this.coveredAt = undefined;
    this.plannedAhead = undefined;
  }

  /** Whether the last count's finding "every due row is covered" still holds: trusted for
   *  COVERED_TTL_MS while nothing has become due past that count's cutoff. Never while a kind is
   *  capped or rate-limited (a plan that gave nothing may have held rows back, not found them
   *  covered). A row inserted meanwhile with a due time already past sorts among the covered ones,
   *  so the shards in flight claim it; what it displaces is counted after the TTL. */
  isCovered(latestDue: number | null, limited: boolean): boolean {
    const c = this.coveredAt;
    return !limited && c !== undefined && this.clock() - c.at < COVERED_TTL_MS && (latestDue === null || latestDue <= c.cutoff);
  }

  /** The credit a plan at this database time may use instead of counting: fresh, already due (a
   *  count ahead of an instant not reached yet is not), and at least a full shard. */
  usableCredit(now: number): Map<string, Credit> {
    const out = new Map<string, Credit>();
    const local = this.clock();
    for (const [kind, c] of this.credit) {
      if (local - c.at < CREDIT_TTL_MS && c.cutoff <= now && c.rows >= this.shardSize(kind)) out.set(kind, c);
    }
    return out;
  }

  /** For the plan at an instant whose rows went into shards ahead of it: the kinds planned ahead
   *  count as covered ([0 uncovered, complete]) while nothing has become due past that instant and
   *  no credit is left for them; other kinds are counted as usual. */
  plannedAheadCredit(now: number, latestDue: number | null): Record<string, [number, boolean]> {
    const ahead = this.plannedAhead;
    if (!ahead) return {};
    if (this.clock() - ahead.at >= COVERED_TTL_MS || (latestDue !== null && latestDue > ahead.cutoff)) {
      this.plannedAhead = undefined;
      return {};
    }
    if (ahead.cutoff > now) return {};
    const out: Record<string, [number, boolean]> = {};
    for (const kind of ahead.kinds) if (!this.credit.has(kind)) out[kind] = [0, true];
    return out;
  }

  /** After a plan (or a tick that found nothing to plan): what is left of each kind's count becomes
   *  the credit, and whether every due row is now covered. */
  afterPlan(planned: PlannedScan | undefined, used: Map<string, Credit>, now: number, room: number): void {
    this.updateCredit(planned, used, now);
    // Nothing new due (no plan), or a plan whose counts (now, or the credit's) saw the last due
    // row of every kind and planned all of them: the due rows as of the earliest of those counts'
    // cutoffs are covered, and the next ticks need not count them again.
    this.coveredAt = !planned
      ? { cutoff: now, at: this.clock() }
      : coversAll(planned, room)
        ? { cutoff: coveredCutoff(planned, used, now), at: this.clock() }
        : undefined;
  }

  /** Whether the plan that used this credit mapped a flood counted ahead for its instant. */
  usedCountAhead(used: Map<string, Credit>): boolean {
    return [...used.values()].some((c) => c.cutoff === this.countedAheadFor);
  }

  /** Whether the instant due at `cutoff` still needs its count ahead (once per instant); marks it
   *  counted. */
  claimCountAhead(cutoff: number): boolean {
    if (this.countedAheadFor === cutoff) return false;
    this.countedAheadFor = cutoff;
    return true;
  }

  /** A count ahead's result: each kind's uncovered rows as credit for that instant. */
  countedAhead(cutoff: number, counts: Map<string, { uncovered: number; complete: boolean }>): void {
    const at = this.clock();
    for (const [kind, c] of counts) this.credit.set(kind, { rows: c.uncovered, complete: c.complete, cutoff, at });
  }

  /** The credit of the instant last counted ahead that is worth mapping ahead of it: two shards'
   *  worth or more (an instant of a steady stream is planned at the instant from the credit). */
  creditToPlanAhead(): { cutoff: number; credit: Map<string, Credit> } | undefined {
    const cutoff = this.countedAheadFor;
    if (cutoff === undefined) return undefined;
    const credit = new Map([...this.credit].filter(([kind, c]) => c.cutoff === cutoff && c.rows >= 2 * this.shardSize(kind)));
    return credit.size === 0 ? undefined : { cutoff, credit };
  }

  /** A plan written ahead of its instant: its credit is updated, and its kinds are covered at the
   *  instant. */
  plannedAheadOf(cutoff: number, planned: PlannedScan, used: Map<string, Credit>): void {
    this.updateCredit(planned, used, cutoff);
    this.plannedAhead = { cutoff, kinds: new Set(planned.byKind.keys()), at: this.clock() };
  }

  private updateCredit(planned: PlannedScan | undefined, used: Map<string, Credit>, now: number): void {
    const next = new Map<string, Credit>();
    for (const [kind, k] of planned?.byKind ?? []) {
      const left = k.uncovered - k.planned;
      const earlier = k.counted ? undefined : used.get(kind);
      if (left > 0) next.set(kind, { rows: left, complete: k.complete, cutoff: earlier?.cutoff ?? now, at: earlier?.at ?? this.clock() });
    }
    this.credit = next;
  }
}

/** Whether a plan left nothing due uncovered: every kind's count (now, or the credit's) saw its
 *  last due row and all of it went into shards (the plan did not fill the room, so no kind was
 *  cut short). */
function coversAll(planned: PlannedScan, room: number): boolean {
  if (planned.shards.length >= room) return false;
  for (const k of planned.byKind.values()) if (!k.complete || k.planned < k.uncovered) return false;
  return true;
}

/** The cutoff up to which a covering plan covered the due rows: the earliest of its counts'. */
function coveredCutoff(planned: PlannedScan, credit: Map<string, Credit>, now: number): number {
  let cutoff = now;
  for (const [kind, k] of planned.byKind) if (!k.counted) cutoff = Math.min(cutoff, credit.get(kind)?.cutoff ?? cutoff);
  return cutoff;
}
