// PostgreSQL connections. Every pool and client gets an 'error' listener: without one, a
// PostgreSQL restart or pg_terminate_backend emits an unhandled 'error' and crashes Node
// (node-postgres #2762, #3260). The pool drops the broken client; the caller's query fails and
// its retry logic takes over.
import pg from 'pg';
import type { Logger } from 'pino';
import { hostLabel, parseConnectionString } from './connection-string.js';
import { engineClientClass } from './multi-host-client.js';
import { noteReached, trackPool } from './reached-hosts.js';
import { versionedApplicationName } from '../release/fleet.js';
import { VERSION } from '../version.js';

// Our pools read int8 (ids, counts) as numbers; ids stay far below 2^53. Scoped to our pools
// instead of pg.types.setTypeParser, which would change every pg user in the process.
const typeParsers: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig['getTypeParser'],
};

export interface PoolOptions {
  connectionString: string;
  max: number;
  applicationName: string;
  logger: Logger;
  /** Abort a transaction left idle this long (a paused or hung worker releases its locks). */
  idleInTransactionTimeoutMs?: number;
  /** How long to wait for a new connection (default 10 s). */
  connectionTimeoutMs?: number;
  /** Cancel a statement running longer than this (default: the server's setting). */
  statementTimeoutMs?: number;
  /** Drop a connection with a statement out and nothing heard for this long (silence-watch.ts);
   *  default: never (the CLI's one-off pools: a migration may run long). */
  silentAfterMs?: number;
}

/**
 * Every new session turns JIT off before the pool hands it out. Our statements are short, but the
 * planner's estimates for the map (plan_shards.sql, its flow-control CTEs over near-empty tables)
 * and for large claims pass jit_above_cost, and compiling then costs 0.2-4 s per call where the
 * statement runs in under 10 ms (bench/analysis.md). A SET rather than a startup option, so that
 * poolers which refuse startup options still work; sent before the caller's first query rather
 * than beside it (pg deprecates queries queued on a busy client).
 */
function jitOff(logger: Logger): (client: pg.Client) => Promise<void> {
  return (client) =>
    client.query('SET jit = off').then(
      () => undefined,
      (err: unknown) => {
        logger.warn({ err: describePgError(err) }, 'could not turn JIT off on a new PostgreSQL connection; statements may pay JIT compilation');
      },
    );
}

/**
 * A pool on a connection string in either libpq form (connection-string.ts). A multi-host string
 * (`postgres://h1,h2/db?target_session_attrs=read-write`) makes each new connection try the hosts
 * in order and keep the first that qualifies (multi-host-client.ts); a connection that meets
 * SQLSTATE 25006 (its server became a standby) is ended and never reused. A malformed or
 * unsupported string throws ConnectionStringError, naming what it refuses.
 */
export function createPool(options: PoolOptions): pg.Pool {
  const target = parseConnectionString(options.connectionString);
  const connectionTimeoutMs = options.connectionTimeoutMs ?? 10_000;
  const Client = engineClientClass(
    target,
    jitOff(options.logger),
    {
      onStandby: (h) =>
        options.logger.warn({ host: hostLabel(h) }, 'PostgreSQL server turned standby under this connection (SQLSTATE 25006); dropping the connection'),
      silentAfterMs: options.silentAfterMs,
    },
    // `timeout-center/1.0.0 worker`: pg_stat_activity shows which version each connection runs
    // (src/release/fleet.ts tells the code before 1.0.0 by its name without one).
    versionedApplicationName(options.applicationName, VERSION),
  );
  const pool = new pg.Pool({
    connectionString: target.plain ? options.connectionString : target.perHost[0]!,
    max: options.max,
    application_name: versionedApplicationName(options.applicationName, VERSION),
    // A new connection may try every host before it lands: each attempt gets connect_timeout.
    connectionTimeoutMillis: connectionTimeoutMs + Math.max(target.hosts.length - 1, 0) * (target.connectTimeoutMs ?? connectionTimeoutMs),
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    types: typeParsers,
    Client,
    ...(options.idleInTransactionTimeoutMs ? { idle_in_transaction_session_timeout: options.idleInTransactionTimeoutMs } : {}),
    ...(options.statementTimeoutMs ? { statement_timeout: options.statementTimeoutMs } : {}),
  });
  const reached = trackPool(pool, options.applicationName, target.display);
  pool.on('error', (err) => {
    options.logger.warn({ err: describePgError(err) }, 'PostgreSQL connection lost (idle client); the pool will reconnect');
  });
  pool.on('connect', (client) => {
    noteReached(reached, hostLabel({ host: client.host, port: client.port }));
    client.on('error', (err) => {
      options.logger.warn({ err: describePgError(err) }, 'PostgreSQL connection lost; the pool will reconnect');
    });
  });
  return pool;
}

/** One client (not pooled, not yet connected) on a connection string in either libpq form: its
 *  connect() tries the hosts as a pool's connections do. `config` adds pg settings (timeouts,
 *  application_name); connectionTimeoutMillis applies per host tried unless connect_timeout says. */
export function createClient(connectionString: string, config: Omit<pg.ClientConfig, 'connectionString'> = {}): pg.Client {
  const target = parseConnectionString(connectionString);
  const applicationName = config.application_name === undefined ? undefined : versionedApplicationName(config.application_name, VERSION);
  const Client = engineClientClass(target, async () => {}, {}, applicationName);
  return new Client({
    ...config,
    ...(applicationName === undefined ? {} : { application_name: applicationName }),
    connectionString: target.plain ? connectionString : target.perHost[0]!,
    ...(target.connectTimeoutMs ? { connectionTimeoutMillis: target.connectTimeoutMs } : {}),
  });
}

/** Keeps the parts of a pg error an operator needs, for logs. */
export function describePgError(err: unknown): Record<string, unknown> {
  if (!(err instanceof Error)) return { message: String(err) };
  const e = err as Error & { code?: string; detail?: string; hint?: string; constraint?: string; table?: string };
  return {
    message: e.message,
    ...(e.code ? { code: e.code } : {}),
    ...(e.detail ? { detail: e.detail } : {}),
    ...(e.hint ? { hint: e.hint } : {}),
    ...(e.constraint ? { constraint: e.constraint } : {}),
  };
}

export function pgErrorCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof (err as { code: unknown }).code === 'string'
    ? (err as { code: string }).code
    : undefined;
}

/** Node's codes for a socket that could not connect or broke (system errors, DNS). */
const SOCKET_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** Errors that say nothing about the rows: the connection or server went away. Retry the unit. */
export function isConnectionError(err: unknown): boolean {
  const code = pgErrorCode(err);
  // 25006: a write on a server that became a standby (a failover); the session was ended
  // (multi-host-client.ts) and the next one looks for the new primary.
  // The socket's own errors (server down, connection reset, host unreachable) carry Node's code,
  // not a SQLSTATE (EPIPE has five letters, as a SQLSTATE has: checked first).
  if (code && SOCKET_ERROR_CODES.has(code)) return true;
  if (code && /^[0-9A-Z]{5}$/.test(code))
    return code.startsWith('08') || code === '25006' || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300';
  const msg = err instanceof Error ? err.message : '';
  return /Connection terminated|ECONNREFUSED|ECONNRESET|EPIPE|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable/i.test(
    msg,
  );
}

/** Deadlock, serialization failure or a lock wait that ran out (lock_timeout, 55P03: a handler
 *  waiting on a row a payer holds): retry the whole transaction; no row is to blame. */
export function isRetryableConflict(err: unknown): boolean {
  const code = pgErrorCode(err);
  return code === '40P01' || code === '40001' || code === '55P03';
}

/** Runs fn in a transaction on a pooled client; rolls back on error and releases the client
 *  (destroying it when the connection broke). */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    broken = isConnectionError(err);
    if (!broken)
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
    throw err;
  } finally {
    client.release(broken);
  }
}
