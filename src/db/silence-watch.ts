// Notices a PostgreSQL connection that went silent: a statement out and not a byte back for
// `ms`, on a connection that stayed open (a dropped firewall or NAT entry, a host gone without a
// reset). Neither side says so: the server's statement_timeout cannot reach us, and TCP keeps a
// socket whose packets vanish for minutes. The socket is destroyed with a connection-class error
// (SQLSTATE 08006), so every statement on it fails, the pool drops it, and callers retry on a new
// connection. Redis' commands connection has the same guard (transport/redis-connection.ts).
import type { Duplex } from 'node:stream';

export class SilentConnectionError extends Error {
  override name = 'SilentConnectionError';
  readonly code = '08006';
  constructor(ms: number) {
    super(
      `PostgreSQL sent nothing for ${ms} ms while a statement was out, on a connection that stayed open (a silent network or a hung server): the connection was dropped`,
    );
  }
}

export class SilenceWatch {
  private outstanding = 0;
  private timer: NodeJS.Timeout | undefined;
  /** When a byte last came (Date.now()). The timer is not re-armed per chunk (a large result
   *  arrives in thousands): when it fires, it checks this and waits out the rest. */
  private heardAt = 0;

  constructor(
    private readonly stream: Duplex,
    private readonly ms: number,
  ) {
    stream.on('data', () => {
      this.heardAt = Date.now();
    });
    stream.once('close', () => this.clear());
  }

  /** A statement goes out; call the returned function once it settled (idempotent). */
  begin(): () => void {
    this.outstanding += 1;
    if (this.outstanding === 1) {
      // Silence counts from the first statement out, not from the last byte of an idle spell.
      this.heardAt = Date.now();
      this.arm(this.ms);
    }
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.outstanding -= 1;
      if (this.outstanding === 0) this.clear();
    };
  }

  private arm(delayMs: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.outstanding === 0) return;
      const silentFor = Date.now() - this.heardAt;
      if (silentFor < this.ms) this.arm(this.ms - silentFor);
      else this.stream.destroy(new SilentConnectionError(this.ms));
    }, delayMs);
  }

  private clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
