// Errors that a Redis failover or restart produces on its own, which the next attempt (a tick, a
// read, an ACK) gets past without anyone's help: redirections and retries while a cluster moves
// slots to a promoted replica, a connection closed under a command, a primary demoted by Sentinel.
// Callers log them at warn (once per episode), keeping error for what needs a person.

/** Reply prefixes of a cluster or replica set in transition (MOVED/ASK reach a caller only when
 *  the client ran out of redirections). */
const TRANSITION_REPLIES = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN|LOADING|READONLY|MASTERDOWN|NOREPLICAS|UNBLOCKED)\b/;

/** ioredis' own messages when a connection or the cluster client is between nodes. */
const CLIENT_MESSAGES = [
  /^Too many Cluster redirections/,
  /^Failed to refresh slots cache/,
  /^None of startup nodes is available/,
  /^Connection is closed/,
  /^Stream isn't writeable/,
  /^Reached the max retries per request limit/,
  /^Cluster is disconnect/,
  /^All sentinels are unreachable/,
  /^Command timed out/,
  /^Socket timeout/,
];

const ERROR_NAMES = new Set(['ClusterAllFailedError', 'MaxRetriesPerRequestError']);

/** True for an error of a Redis failover or restart (also when it is the cause of another). */
export function isRedisFailoverError(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 4) return false;
  // Not a bare network code (ECONNREFUSED...): PostgreSQL's driver raises those too; a Redis
  // command on a lost connection fails with ioredis' own messages below.
  if (ERROR_NAMES.has(err.name)) return true;
  if (TRANSITION_REPLIES.test(err.message) || CLIENT_MESSAGES.some((m) => m.test(err.message))) return true;
  const more = [err.cause, (err as { lastNodeError?: unknown }).lastNodeError, ...(err instanceof AggregateError ? err.errors : [])];
  return more.some((e) => isRedisFailoverError(e, depth + 1));
}
