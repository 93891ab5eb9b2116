// The lock that decides which coordinator is live. Production: redlock on Redis (several
// processes, several machines). Embedded mode (demo, one process): a local lock with the same
// expiry semantics. Either way safety comes from the fencing epoch in PostgreSQL (leadership.ts),
// not from the lock.
import type { Cluster, Redis } from 'ioredis';
import Redlock from 'redlock';

/** A held lock; expiration is a Date.now() timestamp. */
export interface HeldLock {
  readonly expiration: number;
  /** Resolves with the renewed lock; rejects when it was lost. */
  extend(ttlMs: number): Promise<HeldLock>;
  release(): Promise<unknown>;
}

export interface LeaderLock {
  /** Resolves with the lock, or rejects when another holder has it (or the store is unreachable). */
  acquire(key: string, ttlMs: number): Promise<HeldLock>;
}

/** redlock 5.0.0-beta.2 on one Redis connection (one node, the Sentinel primary, or a cluster
 *  client: the lock is one key, so one slot). No retries inside redlock: Leadership tries again
 *  every third of the TTL. (beta.2 can return an already-expired lock after retries,
 *  node-redlock #296; Leadership checks expiration.) */
export function redlockLeaderLock(redis: Redis | Cluster): LeaderLock {
  const redlock = new Redlock([redis], { retryCount: 0, driftFactor: 0.01, automaticExtensionThreshold: 0 });
  redlock.on('error', () => {}); // contention is reported through acquire()'s rejection
  return { acquire: (key, ttlMs) => redlock.acquire([key], ttlMs) };
}

/** A lock inside one process (embedded mode). Several Leadership instances in the same process
 *  may share one to stand in for several coordinators. */
export class LocalLeaderLock implements LeaderLock {
  private readonly holders = new Map<string, { token: number; expiration: number }>();
  private nextToken = 1;

  async acquire(key: string, ttlMs: number): Promise<HeldLock> {
    const now = Date.now();
    const current = this.holders.get(key);
    if (current && current.expiration > now) throw new Error(`lock ${key} is held`);
    const token = this.nextToken++;
    this.holders.set(key, { token, expiration: now + ttlMs });
    return this.held(key, token);
  }

  private held(key: string, token: number): HeldLock {
    const entry = () => {
      const h = this.holders.get(key);
      return h && h.token === token ? h : undefined;
    };
    return {
      expiration: entry()?.expiration ?? 0,
      extend: async (ttlMs: number) => {
        const h = entry();
        if (!h || h.expiration <= Date.now()) throw new Error(`lock ${key} was lost`);
        h.expiration = Date.now() + ttlMs;
        return this.held(key, token);
      },
      release: async () => {
        if (entry()) this.holders.delete(key);
      },
    };
  }
}
