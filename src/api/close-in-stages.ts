// How the HTTP servers (the API and the console) close a connection after an answer that says
// `connection: close`: in stages (RFC 9112 §9.6), so a client still sending its request reads the
// answer. Node closes such a connection at once (socket.destroySoon, called when the response
// finishes); with request bytes still unread, the kernel then resets the connection, and a client
// that is still writing fails (EPIPE) before it reads what it was sent: a 413 for a body far over
// the limit, answered before the body is read, was lost about half the time.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * From now on, each connection the server closes ends its side first (the answer is out, then the
 * end), then reads whatever the client still sends into the void until the client's own end, for
 * at most lingerMs: a client cannot keep the server reading.
 */
export function closeConnectionsInStages(server: Server, lingerMs: number): void {
  server.on('connection', (socket: Socket) => {
    socket.destroySoon = function closeInStages(this: Socket) {
      this.end();
      this.resume();
      const timer = setTimeout(() => this.destroy(), lingerMs).unref();
      this.once('end', () => this.destroy());
      this.once('close', () => clearTimeout(timer));
    };
  });
}
