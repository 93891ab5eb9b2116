// Which PostgreSQL errors say the connection or server went away (retry the unit, exit 3, answer
// 503) and which are about the statement. The errors are real: pg connecting to a port nobody
// listens on, to a server that resets the connection, and to the suite's PostgreSQL.
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isConnectionError } from '../../src/db/pool.js';
import { isBatchLevel } from '../../src/worker/failures.js';
import { ADMIN_DATABASE_URL } from '../helpers/services.js';

let resetter: net.Server;
let resetPort: number;
let closedPort: number;

/** What pg's client rejects with when connecting to 127.0.0.1:port. */
async function connectError(port: number): Promise<unknown> {
  const client = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  return client.connect().then(
    () => client.end().then(() => new Error('connected')),
    (err: unknown) => err,
  );
}

beforeAll(async () => {
  // A port that was just free: nobody listens on it.
  const probe = net.createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  closedPort = (probe.address() as net.AddressInfo).port;
  await new Promise((r) => probe.close(r));
  // A server that answers every connection with a TCP reset (a host that crashed and came back,
  // a firewall or proxy that drops the session).
  resetter = net.createServer((socket) => socket.once('data', () => socket.resetAndDestroy()));
  await new Promise<void>((r) => resetter.listen(0, '127.0.0.1', r));
  resetPort = (resetter.address() as net.AddressInfo).port;
});

afterAll(() => new Promise((r) => resetter.close(r)));

describe('isConnectionError', () => {
  it('takes a refused connection (the server is down) as a connection error', async () => {
    const err = await connectError(closedPort);
    expect((err as { code?: string }).code).toBe('ECONNREFUSED');
    expect(isConnectionError(err)).toBe(true);
    expect(isBatchLevel(err)).toBe(true);
  });

  it('takes a connection reset by the peer as a connection error', async () => {
    const err = await connectError(resetPort);
    expect((err as { code?: string }).code).toBe('ECONNRESET');
    expect(isConnectionError(err)).toBe(true);
    expect(isBatchLevel(err)).toBe(true);
  });

  it('takes a session ended by the server (57P01) as one, a statement PostgreSQL rejected as not', async () => {
    const pool = new pg.Pool({ connectionString: ADMIN_DATABASE_URL, max: 2 });
    pool.on('error', () => {});
    try {
      const syntax = await pool.query('SELEC 1').catch((e: unknown) => e);
      expect(syntax).toBeInstanceOf(pg.DatabaseError);
      expect(isConnectionError(syntax)).toBe(false);
      const victim = await pool.connect();
      victim.on('error', () => {});
      const pid = (await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await pool.query('SELECT pg_terminate_backend($1)', [pid]);
      const ended = await victim.query('SELECT 1').catch((e: unknown) => e);
      victim.release(true);
      expect(isConnectionError(ended)).toBe(true);
    } finally {
      await pool.end();
    }
  });

  it('takes a write to a closed socket (EPIPE, five letters like a SQLSTATE) as one', () => {
    // A socket error as Node raises it on a write after the peer closed (not reproducible on demand
    // against a local server: the kernel's timing decides between EPIPE and ECONNRESET).
    expect(isConnectionError(Object.assign(new Error('write EPIPE'), { code: 'EPIPE', errno: -32, syscall: 'write' }))).toBe(true);
  });

  it('does not take an error of our own carrying some other code for one', () => {
    expect(isConnectionError(Object.assign(new Error('bad input'), { code: 'ERR_INVALID_ARG_TYPE' }))).toBe(false);
    expect(isConnectionError(Object.assign(new Error('no such file'), { code: 'ENOENT' }))).toBe(false);
  });
});
