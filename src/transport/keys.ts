// Redis key names. Every key a command or pipeline touches together shares one hash tag, so no
// command crosses slots on a Redis Cluster, and each kind has its own tag, so different kinds'
// streams spread over the masters (docs/operations.md "Redis keys"):
//   <prefix>:{<kind>}:shards   the kind's stream (consumer group `workers`)
//   <prefix>:{<kind>}:marker   the kind's channel marker: missing = that slot's data was lost
//   <prefix>:coordinator-lock  the leadership lock (one key, hashed whole: any slot will do)
// The prefix may not hold braces (config.ts), or the tag would be the prefix's.

/** The hash tag of a kind's keys. */
export const kindTag = (kind: string): string => `{${kind}}`;

export const streamKey = (prefix: string, kind: string): string => `${prefix}:${kindTag(kind)}:shards`;

/** Lives in the same slot (so on the same master) as the kind's stream: when that master's data
 *  is gone, so is the marker, and the coordinator republishes from PostgreSQL. */
export const markerKey = (prefix: string, kind: string): string => `${prefix}:${kindTag(kind)}:marker`;

/** Unchanged from the single-node layout, so coordinators of both versions contend for one lock
 *  during an upgrade. */
export const leaderLockKey = (prefix: string): string => `${prefix}:coordinator-lock`;
