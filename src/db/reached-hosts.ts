// Which host each of this process's pools reaches: set by every new connection (pool.ts), read by
// /readyz and logs. With a multi-host connection string this is how an operator sees where a
// failover left each pool.
import type pg from 'pg';

export interface ReachedHost {
  /** The pool's name (its application_name). */
  pool: string;
  /** The hosts the connection string names, e.g. "h1:5432,h2:5432/db (read-write)". */
  target: string;
  /** host:port of the newest connection; undefined until one opened. */
  host: string | undefined;
  /** When a new connection last landed on a host other than the one before (ISO time). */
  since: string | undefined;
}

const pools = new Map<pg.Pool, ReachedHost>();

export function trackPool(pool: pg.Pool, name: string, target: string): ReachedHost {
  const entry: ReachedHost = { pool: name, target, host: undefined, since: undefined };
  pools.set(pool, entry);
  return entry;
}

export function noteReached(entry: ReachedHost, host: string): void {
  if (entry.host !== host) entry.since = new Date().toISOString();
  entry.host = host;
}

/** The pools not yet ended, each with the host it reaches. */
export function reachedHosts(): ReachedHost[] {
  for (const pool of pools.keys()) if (pool.ending || pool.ended) pools.delete(pool);
  return [...pools.values()].map((e) => ({ ...e }));
}

/** The entry of one pool (undefined for a pool not made by createPool). */
export function reachedHost(pool: pg.Pool): ReachedHost | undefined {
  const e = pools.get(pool);
  return e ? { ...e } : undefined;
}
