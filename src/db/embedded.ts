// Embedded PostgreSQL for the demo and single-machine use: PGlite (PostgreSQL compiled to WASM,
// data in a local folder) served on a loopback port over the PostgreSQL wire protocol, so the
// rest of the code keeps using node-postgres unchanged.
//
// PGlite is ONE backend session. pglite-socket's stock multiplexer serialises whole transactions
// but forwards the messages of extended-protocol queries one by one, so two pool clients running
// parameterised queries at once interleave Parse/Bind/Execute and fail with "unnamed prepared
// statement does not exist" (seen with pglite 0.5.14 / pglite-socket 0.2.17). SessionQueue below
// gives the session to one connection from its first message until a Sync (or simple Query)
// leaves it outside a transaction block; other connections wait their turn. So every pool client
// works, transactions run one at a time, and FOR UPDATE [SKIP LOCKED] never waits (there is no
// other session to wait for). The cost: a connection that sits idle inside a transaction blocks
// the others, which a real server would not; our transactions never wait on another connection.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join, resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketHandler, type PGLiteSocketHandlerOptions } from '@electric-sql/pglite-socket';
import type { Logger } from 'pino';

const SYNC = 0x53; // 'S'
const QUERY = 0x51; // 'Q'
const TERMINATE = 0x58; // 'X'
const PROTOCOL_3 = 196608;

interface Queued {
  handlerId: number;
  message: Uint8Array;
  onData: (data: Uint8Array) => void;
  resolve: (bytes: number) => void;
  reject: (err: Error) => void;
}

/** Gives the single PGlite session to one connection at a time (see the header). Implements the
 *  three methods PGLiteSocketHandler calls on its query queue. */
export class SessionQueue {
  private readonly queue: Queued[] = [];
  private owner: number | undefined;
  private pumping = false;

  constructor(private readonly db: PGlite) {}

  enqueue(handlerId: number, message: Uint8Array, onData: (data: Uint8Array) => void): Promise<number> {
    return new Promise((resolve, reject) => {
      this.queue.push({ handlerId, message, onData, resolve, reject });
      void this.pump();
    });
  }

  private next(): Queued | undefined {
    const i = this.owner === undefined ? 0 : this.queue.findIndex((q) => q.handlerId === this.owner);
    if (i < 0 || i >= this.queue.length) return undefined;
    return this.queue.splice(i, 1)[0];
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (let item = this.next(); item; item = this.next()) {
        this.owner = item.handlerId;
        let bytes = 0;
        try {
          await this.db.runExclusive(() =>
            this.db.execProtocolRawStream(item!.message, {
              onRawData: (data) => {
                bytes += data.length;
                item!.onData(data);
              },
            }),
          );
          item.resolve(bytes);
        } catch (err) {
          item.reject(err instanceof Error ? err : new Error(String(err)));
        }
        if (endsTurn(item.message) && !this.db.isInTransaction()) this.owner = undefined;
      }
    } finally {
      this.pumping = false;
    }
  }

  clearQueueForHandler(handlerId: number): void {
    for (let i = this.queue.length - 1; i >= 0; i -= 1) {
      const q = this.queue[i]!;
      if (q.handlerId !== handlerId) continue;
      this.queue.splice(i, 1);
      q.reject(new Error('connection closed'));
    }
  }

  /** A connection went away: roll back what it left open and let the others in. */
  async clearTransactionIfNeeded(handlerId: number): Promise<void> {
    if (this.owner !== handlerId) return;
    if (this.db.isInTransaction()) await this.db.exec('ROLLBACK').catch(() => {});
    this.owner = undefined;
    void this.pump();
  }
}

/** True when the message completes a unit of work: after it, the session may change hands
 *  (unless a transaction block is open). */
function endsTurn(message: Uint8Array): boolean {
  const type = message[0];
  if (type === SYNC || type === QUERY || type === TERMINATE) return true;
  // The startup message has no type byte: length, then the protocol version.
  if (message.length >= 8) {
    const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
    if (view.getInt32(4) === PROTOCOL_3) return true;
  }
  return false;
}

export interface EmbeddedPostgres {
  /** postgres:// URL of the loopback server. */
  url: string;
  dataDir: string;
  close(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Folder that keeps the data between runs (created if missing). */
  dataDir: string;
  logger: Logger;
  /** Loopback port to serve on; 0 (default) picks a free one. */
  port?: number;
}

const PID_FILE = 'timeout-center-embedded.pid';

/** PGlite takes no lock on its folder, and two processes writing one folder corrupt it: a pid
 *  file says who has it; a stale one (its process is gone) is taken over. */
function claimDataDir(dataDir: string): () => void {
  const file = join(dataDir, PID_FILE);
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const pid = Number(readFileSync(file, 'utf8').trim());
    let alive = false;
    try {
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid) alive = (process.kill(pid, 0), true);
    } catch (e) {
      alive = (e as NodeJS.ErrnoException).code === 'EPERM';
    }
    // eslint-disable-next-line preserve-caught-error -- not a symptom of the caught error: the probe's answer
    if (alive) throw new Error(`the embedded PostgreSQL in ${dataDir} is in use by process ${pid}; stop it or pick another --data-dir`);
    writeFileSync(file, String(process.pid));
  }
  return () => rmSync(file, { force: true });
}

/** Opens (or creates) the PGlite database in dataDir and serves it on 127.0.0.1. */
export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedPostgres> {
  const dataDir = resolve(options.dataDir);
  mkdirSync(dataDir, { recursive: true });
  const releaseDir = claimDataDir(dataDir);
  const started = Date.now();
  let db: PGlite;
  try {
    db = await PGlite.create(dataDir);
  } catch (err) {
    releaseDir();
    throw new Error(
      `cannot open the embedded PostgreSQL (PGlite) in ${dataDir}: ${(err as Error).message}. Another process may be using it, or it was written by another PGlite version: delete the folder to start over`,
      { cause: err },
    );
  }
  options.logger.debug({ dataDir, ms: Date.now() - started }, 'embedded PostgreSQL opened');
  const queue = new SessionQueue(db);
  const sockets = new Set<Socket>();
  const handlers = new Set<PGLiteSocketHandler>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    // PGLiteSocketHandler's option type names its own queue class (which has private members);
    // SessionQueue provides the same three methods.
    const handler = new PGLiteSocketHandler({ queryQueue: queue as unknown as PGLiteSocketHandlerOptions['queryQueue'], closeOnDetach: true });
    handlers.add(handler);
    const forget = () => handlers.delete(handler);
    handler.addEventListener('close', forget);
    handler.addEventListener('error', forget);
    handler.attach(socket).catch((err: unknown) => {
      options.logger.warn({ err }, 'embedded PostgreSQL: could not attach a connection');
      socket.destroy();
    });
  });
  let port: number;
  try {
    port = await new Promise<number>((resolvePort, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, '127.0.0.1', () => {
        const address = server.address();
        resolvePort(typeof address === 'object' && address ? address.port : 0);
      });
    });
  } catch (err) {
    await db.close().catch(() => {});
    releaseDir();
    throw new Error(`embedded PostgreSQL: cannot listen on 127.0.0.1:${options.port ?? 0}: ${(err as Error).message}`, { cause: err });
  }
  let closing: Promise<void> | undefined;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    dataDir,
    close() {
      closing ??= (async () => {
        for (const h of handlers) await h.detach(true).catch(() => {});
        for (const s of sockets) s.destroy();
        await new Promise<void>((r) => server.close(() => r()));
        await db.close();
        releaseDir();
      })();
      return closing;
    },
  };
}
