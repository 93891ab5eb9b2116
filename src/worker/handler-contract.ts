// The handler contract: what a kind's handler receives (a shard's items and its context), what it
// returns, and the errors it may throw. A leaf module (it reads only pg-text.ts): every part of the
// worker, and the public API (index.ts), takes these from here.
import type pg from 'pg';
import { literalOf } from '../db/pg-text.js';

export interface ShardItem {
  bizId: string;
  payload: unknown;
}

export interface HandlerContext {
  kind: string;
  shardId: number;
  /** A connection inside a transaction that commits with the handler's result: the shard's own
   *  transaction on the same-database path; on the external path (code handlers), a transaction
   *  of its own on the kind's business database (or the center's), which also writes the marker.
   *  After the time limit it is destroyed: a handler must not keep using it. */
  client: pg.PoolClient;
  /** Aborted when the kind's time limit passes. */
  signal: AbortSignal;
  /** The shard's attempt (its lease), from 1. */
  attempt?: number;
  /** The bucket the shard claims from, on the Citus layout (docs/scale.md "Citus: what runs"). */
  bucket?: number | undefined;
}

/** What a handler reports: ids it changed; ids that failed (with why); every other id is skipped. */
export interface HandlerResult {
  applied: string[];
  failed?: { bizId: string; error: string }[];
}

/** A handler may also just return the applied ids. Throwing fails the whole batch, which the
 *  worker then splits to find the failing ids. Throw PermanentError to skip the remaining
 *  attempts of those ids, BatchFailure when no row is to blame. */
export type ShardHandler = (items: ShardItem[], ctx: HandlerContext) => Promise<HandlerResult | string[]>;

/** A failure that retrying cannot fix (bullmq's UnrecoverableError): the ids fail at once. */
export class PermanentError extends Error {
  override name = 'PermanentError';
}

/** Throw from a code handler (or raised by the HTTP handler) when the whole batch failed for a
 *  reason no single row explains: the shard is retried later with backoff. */
export class BatchFailure extends Error {
  override name = 'BatchFailure';
  constructor(
    message: string,
    /** The target asked us to wait this long (Retry-After). */
    readonly retryAfterMs?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The handler ran past its time limit; its connection was destroyed. */
export class HandlerTimeoutError extends BatchFailure {
  override name = 'HandlerTimeoutError';
}

/** A handler's answer in one shape; refuses anything else. */
export function normalizeResult(result: HandlerResult | string[] | undefined | null): HandlerResult {
  // ids parsed from the text PostgreSQL sent (a SQL handler's): strings already, and their literal
  // is remembered (pg-text.ts literalOf) for the marker and the record
  if (Array.isArray(result)) return { applied: literalOf(result) !== undefined ? result : result.map(String) };
  if (!result || !Array.isArray(result.applied)) {
    throw new Error('handler returned neither an array of applied ids nor { applied: [...] }');
  }
  return { applied: result.applied.map(String), failed: result.failed ?? [] };
}
