// What the soak's modules share: the seeded random source of the nemesis, the kinds' close
// statement, and the shape of a fault record (pools that survive server restarts: test/helpers/quiet-pool.ts).
import type pg from 'pg';

/** Same-database kind: orders and timeouts in the center's database. */
export const LOCAL = 'order.unpaid';
/** External kind: timeouts in the center, orders in a business database it does not own. */
export const REMOTE = 'order.remote';
/** Stored beside its orders: orders and timeouts in one of three stores (topology stores). */
export const STORED = 'order.stored';
export const LEASE_MS = 3000;
/** Each close counts itself (orders.closes), so a second effect shows. */
export const COUNTED_CLOSE =
  "UPDATE orders SET status = 'closed', closed_at = now(), closes = closes + 1 WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";

// A small seeded PRNG (mulberry32): the same seed injects the same sequence of faults.
let state = 1;
export function seedRandom(seed: number): void {
  state = seed >>> 0;
}
export function random(): number {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
export const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
export async function waitUntil(what: string, test: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await test().catch(() => false)) return;
    await sleep(100);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}
export const log = (msg: string) => process.stdout.write(`[soak ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

/** A database of the soak: the center, the business database, or a store. */
export interface Db {
  name: string;
  pool: pg.Pool;
}

export interface Fault {
  type: string;
  target?: string;
  /** When the nemesis began it (this machine's clock, which is also the databases'). */
  startMs: number;
  /** When the nemesis was done with it (the server back, the process thawed). */
  doneMs: number;
  /** When the server it took away answered again (restarted, or a replica promoted): the gap's
   *  report says how long closes took to resume after that. Absent for process faults. */
  backMs?: number;
  /** End of its lateness window: timeouts due up to a lease after it are not counted as clean. */
  endMs: number;
  /** The orders databases whose closes it can stop (their close gaps are measured); all when absent. */
  scope?: string[];
  /** Figures of the fault itself (a failover's promotion time, ...). */
  detail?: Record<string, number | string>;
}

/** What a fault action reports; the nemesis stamps startMs. */
export type FaultResult = Omit<Fault, 'startMs'>;
