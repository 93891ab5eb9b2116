// Failure classes of the external path. A batch-level failure says nothing about the rows (the
// target is down, slow, refusing us, or replied nonsense): the whole shard is tried again later
// behind a circuit breaker, and no timeout fails for good because of it. Only a row-level failure
// (a handler that names failed ids, a statement failing on one row's data) is split and isolated.
import { isConnectionError, isRetryableConflict, pgErrorCode } from '../db/pool.js';
import { BatchFailure } from './handler-contract.js';

/** The business commit may or may not have happened (the connection broke while COMMIT was in
 *  flight): only the marker can tell, so the shard is left to its lease and a re-run reads it. */
export class UnknownOutcomeError extends Error {
  override name = 'UnknownOutcomeError';
}

/**
 * PostgreSQL errors that belong to the batch, not to a row: connection lost or refused, server
 * shutting down or starting (57P0x), statement_timeout or cancel (57014), out of resources (53),
 * deadlock and serialization failures (40), a statement that cannot run at all (42: missing
 * table or function, e.g. a business database not migrated), authentication and unknown
 * database (28, 3D).
 */
export function isBatchLevelPgError(err: unknown): boolean {
  if (isConnectionError(err) || isRetryableConflict(err)) return true;
  const code = pgErrorCode(err);
  if (!code) return false;
  return (
    code === '57014' ||
    code.startsWith('57P') ||
    code.startsWith('53') ||
    code.startsWith('42') ||
    code.startsWith('28') ||
    code.startsWith('3D') ||
    code.startsWith('08')
  );
}

/** Whether an error from applying a batch retries the whole batch (true) or may be split. */
export function isBatchLevel(err: unknown): boolean {
  if (err instanceof BatchFailure) return true;
  if (isBatchLevelPgError(err)) return true;
  // Network errors of fetch and sockets (refused, DNS, reset) carry a code on the cause.
  const code = (err as { code?: unknown; cause?: { code?: unknown } } | undefined)?.cause?.code ?? (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EPIPE|EHOSTUNREACH|UND_ERR_.*)$/.test(code);
}

export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: string }).code;
  return (code ? `${code}: ` : '') + err.message.slice(0, 1000);
}
