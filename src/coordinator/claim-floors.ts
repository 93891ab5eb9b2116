// Claim floors (sql/0030, sql/0041; docs/architecture.md "The claim floor"): per kind, the key
// (available_at, id) from which the map's counts and the shards' claims read the due index, instead
// of its start. A key, not a time: a flood's rows share one due instant, and a floor must pass the
// ones already claimed within it.
// While an old snapshot anywhere in the cluster keeps the rows already claimed from being
// vacuumed, their index entries stay in front of the live ones, and a walk from the start fetches
// each of them, at every claim of every shard, for as long as the snapshot lives.
//
// next_due.sql computes the new floors at every tick from the previous ones and from the marks
// kept here; this object carries them from tick to tick. A floor stays a safe lower bound once
// computed (a row written pending after it is either at or above it, or written late and found by
// the next tick), so nothing here is reset with leadership: a new leader starts with no floor (the
// first tick reads each kind's due index from its start once) only because it is a new process.
// On one server only: a standby promoted without the primary's last commits has rows pending
// again, and scans open again, below what was computed on the primary, and the pool reaches it
// without an error (its idle sessions to the dead primary end quietly). next_due.sql returns the
// server it ran on and takes the one the inputs were computed on; on another, it leaves them out.
import type { ReduceBounds } from './reduce.js';

/** next_due.sql's claim-floor inputs ($2 floors, $3 marks), as jsonb text. */
export interface NextDueInputs {
  floors: string;
  marks: string;
  /** next_due.sql's $4 and $5 */
  shardsFrom: number;
  scansFrom: number;
  /** next_due.sql's $6: the server the others were computed on */
  server: string;
  /** next_due.sql's $7: the xmin of the tick the floors are from ('': none) */
  lateFrom: string;
}

/** Marks kept at most: one per tick, dropped once a newer one is older than every running
 *  transaction. While a long writing transaction runs, the oldest mark is kept and the others
 *  thinned (fewer marks only make a floor lower: never unsafe). */
const MAX_MARKS = 64;

/** A floor: [available_at as text (no rounding to milliseconds), id as text (a bigint)]. */
export type FloorKey = [string, string];

export interface FloorsRow {
  /** {"kind": [available_at, id]} */
  floors?: Record<string, FloorKey> | null;
  mark_at?: string | null;
  mark_xid?: string | null;
  /** pg_snapshot_xmin of the statement's snapshot (xid8 as text) */
  xmin?: string | null;
  /** the oldest shard id in flight (bigint as text; sql/0042) */
  in_flight_from?: string | null;
  /** the oldest scan id not reduced (bigint as text) */
  open_scans_from?: string | null;
  /** the server this tick ran on (its postmaster's start and address) */
  server?: string | null;
}

export class ClaimFloors {
  private floors: Record<string, FloorKey> = {};
  private marks: { at: string; xid: string }[] = [];
  /** The oldest shard in flight at the last tick: the shards in flight are read from it (sql/0042).
   *  A shard enters flight only when written, with a higher id, or from running back to queued. */
  private inFlightFrom = 0;
  /** The oldest scan not reduced at the last tick: the reduce and the reaper read scans from it
   *  (a scan enters mapped only when written, with a higher id, or from mapping). */
  private openScansFrom = 0;
  /** The xmin of the tick the floors are from: the next tick's late probe reads the rows written
   *  late by transactions from it on (sql/0054); a row written before, it saw. */
  private lateFrom = '';
  /** The server all of the above were computed on: next_due.sql leaves them out on another one. */
  private server = '';

  /** next_due.sql's $2-$7. */
  inputs(): NextDueInputs {
    return {
      floors: JSON.stringify(this.floors),
      marks: JSON.stringify(this.marks),
      shardsFrom: this.inFlightFrom,
      scansFrom: this.openScansFrom,
      server: this.server,
      lateFrom: this.lateFrom,
    };
  }

  /** reduce.sql's $2, close_orphan_scans.sql's $2: the oldest scan id not reduced. */
  scansFrom(): number {
    return this.openScansFrom;
  }

  /** reduce.sql's $2-$4: the oldest scan not reduced and shard in flight, and their server. */
  reduceBounds(): ReduceBounds {
    return { scansFrom: this.openScansFrom, shardsFrom: this.inFlightFrom, server: this.server };
  }

  /** plan_shards.sql's $12 and $13, count_ahead.sql's $4 and $5. */
  planInputs(): { floors: string; shardsFrom: number } {
    return { floors: this.param(), shardsFrom: this.inFlightFrom };
  }

  /** The reaper's statements: the oldest shard id in flight. */
  shardsFrom(): number {
    return this.inFlightFrom;
  }

  /** plan_shards.sql's $12, count_ahead.sql's $4, backlog.sql's $1: {"kind": [available_at, id]}. */
  param(): string {
    return JSON.stringify(this.floors);
  }

  /** The floor of a kind, or undefined: from the start. */
  floorOf(kind: string): FloorKey | undefined {
    return this.floors[kind];
  }

  /** Forgets every floor and mark: the next tick reads each kind's due index (and the shards in
   *  flight) from its start once.
   *  After a failed tick: the database may have failed over to a standby that had not received
   *  the last claims, whose rows are pending again below a floor computed on the old primary. */
  reset(): void {
    this.floors = {};
    this.marks = [];
    this.inFlightFrom = 0;
    this.openScansFrom = 0;
    this.lateFrom = '';
    this.server = '';
  }

  /** Takes next_due.sql's result (nothing on the Citus layout, whose claims read no floor). */
  update(row: FloorsRow): void {
    if (row.server !== undefined && row.server !== null && row.server !== this.server) {
      // computed on another server than the last tick's: next_due.sql left out every input
      this.reset();
      this.server = row.server;
    }
    if (row.floors) {
      this.floors = { ...row.floors };
      // the floors and the snapshot they were computed in go together
      this.lateFrom = row.xmin ?? '';
    }
    if (row.in_flight_from) this.inFlightFrom = Number(row.in_flight_from);
    if (row.open_scans_from) this.openScansFrom = Number(row.open_scans_from);
    if (row.xmin) {
      const xmin = BigInt(row.xmin);
      // The newest mark older than every running transaction is the one the next tick compares
      // with: the ones before it are no longer needed.
      let newest = -1;
      for (let i = 0; i < this.marks.length; i++) if (BigInt(this.marks[i]!.xid) <= xmin) newest = i;
      if (newest > 0) this.marks = this.marks.slice(newest);
    }
    if (row.mark_at && row.mark_xid) {
      this.marks.push({ at: row.mark_at, xid: row.mark_xid });
      if (this.marks.length > MAX_MARKS) this.marks.splice(1, 1);
    }
  }
}
