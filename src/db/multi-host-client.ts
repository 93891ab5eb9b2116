// Connecting through a multi-host connection string (connection-string.ts) the way libpq does:
// each new connection tries the hosts in order and keeps the first that qualifies for the
// string's target_session_attrs. pg's Client connects to one host and cannot be reused after a
// failed attempt, so the hosts are tried with short-lived probe connections, and the client then
// connects to the host that qualified and checks it once more (a failover can happen between the
// two). A connection that later finds itself on a standby (SQLSTATE 25006) is ended, so the pool
// never hands it out again, and the next new connection looks for the primary anew.
import type { Duplex } from 'node:stream';
import pg from 'pg';
import { SilenceWatch } from './silence-watch.js';
import { hostLabel, type HostPort, type ParsedConnection, type TargetSessionAttrs } from './connection-string.js';

/** No host qualified; a connection-class error (SQLSTATE 08001) so every caller retries it. */
export class NoQualifyingHostError extends Error {
  override name = 'NoQualifyingHostError';
  readonly code = '08001';
}

const QUALIFY = `SELECT pg_catalog.pg_is_in_recovery() AS in_recovery, pg_catalog.current_setting('transaction_read_only') AS read_only`;

/** Why a connected session does not qualify, or undefined when it does. */
export async function disqualification(client: pg.ClientBase, tsa: TargetSessionAttrs): Promise<string | undefined> {
  if (tsa === 'any') return undefined;
  const { rows } = await client.query<{ in_recovery: boolean; read_only: string }>(QUALIFY);
  const r = rows[0]!;
  if (r.in_recovery) return 'server is in hot standby mode (pg_is_in_recovery)';
  if (tsa === 'read-write' && r.read_only === 'on') return 'session is read-only (transaction_read_only = on)';
  return undefined;
}

export interface ProbeOptions {
  /** Per host tried; default 10 s. */
  connectTimeoutMs?: number;
  applicationName?: string;
}

/** Tries the hosts in order and returns the index of the first that qualifies. */
export async function firstQualifyingHost(target: ParsedConnection, options: ProbeOptions = {}): Promise<number> {
  const reasons: string[] = [];
  for (let i = 0; i < target.hosts.length; i++) {
    const probe = new pg.Client({
      connectionString: target.perHost[i]!,
      connectionTimeoutMillis: target.connectTimeoutMs ?? options.connectTimeoutMs ?? 10_000,
      application_name: `${options.applicationName ?? 'timeout-center'} (host probe)`,
    });
    probe.on('error', () => {});
    try {
      await probe.connect();
      const why = await disqualification(probe, target.targetSessionAttrs);
      if (!why) return i;
      reasons.push(`${hostLabel(target.hosts[i]!)}: ${why}`);
    } catch (err) {
      reasons.push(`${hostLabel(target.hosts[i]!)}: ${(err as Error).message}`);
    } finally {
      await probe.end().catch(() => {});
    }
  }
  throw new NoQualifyingHostError(`no host of ${target.display} accepted a ${target.targetSessionAttrs} session: ${reasons.join('; ')}`);
}

type Callback = ((err: Error) => void) | ((err: null, c: pg.Client) => void);

export interface ClientHooks {
  /** After a session is set up on a host, before the pool hands it out. */
  onConnected?: (host: HostPort) => void;
  /** A statement failed with 25006 (the server is a standby now); the connection is being ended. */
  onStandby?: (host: HostPort) => void;
  /** Drop a connection with a statement out and nothing heard for this long (silence-watch.ts). */
  silentAfterMs?: number;
}

/**
 * A pg Client class for `target` that runs `setup` (e.g. SET jit = off) on each new session.
 * Single-host strings without target_session_attrs connect as pg always did; otherwise see above.
 */
export function engineClientClass(
  target: ParsedConnection | undefined,
  setup: (client: pg.Client) => Promise<void>,
  hooks: ClientHooks = {},
  applicationName?: string,
): typeof pg.Client {
  return class EngineClient extends pg.Client {
    constructor(config?: string | pg.ClientConfig) {
      super(config);
      // Any statement failing with 25006 means the server this session is on has become a
      // standby: end the session, so the pool (which drops ending clients on release) never
      // reuses it. The caller sees the error (a connection error: pool.ts isConnectionError).
      const query = this.query.bind(this) as (...args: unknown[]) => unknown;
      (this as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        // The silence watch counts the statement out until it settles, in each of pg's forms: a
        // callback (pg-pool's own query), a promise, or a submittable (a cursor).
        const settled = this.silence?.begin();
        const failed = (err: unknown): void => {
          if ((err as { code?: unknown } | undefined)?.code === '25006') {
            hooks.onStandby?.({ host: this.host, port: this.port });
            void this.end().catch(() => {});
          }
        };
        const last = args.length - 1;
        // pool.query() passes a callback: its statements meet 25006 too (the coordinator's tick)
        if (typeof args[last] === 'function') {
          const callback = args[last] as (...a: unknown[]) => unknown;
          args[last] = (err: unknown, ...rest: unknown[]) => {
            settled?.();
            if (err) failed(err);
            return callback(err, ...rest);
          };
        }
        const r = query(...args);
        if (r instanceof Promise) {
          r.then(settled, (err: unknown) => {
            settled?.();
            failed(err);
          });
        } else if (settled && r && typeof (r as { once?: unknown }).once === 'function') {
          (r as NodeJS.EventEmitter).once('end', settled).once('error', settled);
        } else if (settled && typeof args[last] !== 'function') settled();
        return r;
      };
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: Callback): void;
    override connect(callback?: Callback): Promise<pg.Client> | void {
      const ready = this.open();
      if (!callback) return ready;
      ready.then(
        (client) => (callback as (err: null, c: pg.Client) => void)(null, client),
        (err: Error) => (callback as (err: Error) => void)(err),
      );
    }

    private async open(): Promise<pg.Client> {
      // pg-pool listens for a client's 'error' only once connect() has called back, and open()
      // runs statements (the target check, setup) before that: a server shutting down then would
      // emit 'error' with no listener and crash the process (node-postgres #2762). Failures during
      // open() reach the caller as the rejection of the statement or of connect().
      const swallow = (): void => {};
      this.on('error', swallow);
      try {
        return await this.openOnce();
      } finally {
        this.removeListener('error', swallow);
      }
    }

    private silence: SilenceWatch | undefined;

    private async openOnce(): Promise<pg.Client> {
      if (target && target.hosts.length > 1) {
        const i = await firstQualifyingHost(target, { applicationName });
        this.host = target.hosts[i]!.host;
        this.port = target.hosts[i]!.port;
      }
      await super.connect();
      if (target) {
        let why: string | undefined;
        try {
          why = await disqualification(this, target.targetSessionAttrs);
        } catch (err) {
          await this.end().catch(() => {});
          throw err;
        }
        if (why) {
          await this.end().catch(() => {});
          throw new NoQualifyingHostError(`${hostLabel({ host: this.host, port: this.port })} no longer qualifies: ${why}`);
        }
      }
      await setup(this);
      const stream = (this as unknown as { connection?: { stream?: Duplex } }).connection?.stream;
      if (hooks.silentAfterMs && stream) this.silence = new SilenceWatch(stream, hooks.silentAfterMs);
      hooks.onConnected?.({ host: this.host, port: this.port });
      return this;
    }
  };
}
