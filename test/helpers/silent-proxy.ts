// A TCP proxy in front of a server whose connections can go silent: `silence()` stops forwarding
// on every connection open at that moment, in both directions, without closing any of them (no
// FIN, no RST), as a dropped firewall or NAT entry, or a host that vanished, leaves them. New
// connections are forwarded as before. The only way out for a client is to notice the silence.
import net from 'node:net';

export interface SilentProxy {
  port: number;
  /** Connections open now; the silenced ones stay open and count. */
  open(): number;
  /** Silences every connection open now; returns how many. */
  silence(): number;
  close(): Promise<void>;
}

export async function startSilentProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<SilentProxy> {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket; silent: boolean }>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream, silent: false };
    pairs.add(pair);
    client.on('data', (d) => {
      if (!pair.silent) upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (!pair.silent) client.write(d);
    });
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // A silenced connection never passes a close on either: that is the point.
    client.on('close', () => {
      if (!pair.silent) end();
    });
    upstream.on('close', () => {
      if (!pair.silent) end();
    });
    client.on('error', () => {});
    upstream.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    open: () => pairs.size,
    silence: () => {
      let n = 0;
      for (const p of pairs) {
        if (!p.silent) n += 1;
        p.silent = true;
      }
      return n;
    },
    close: async () => {
      for (const p of pairs) {
        p.client.destroy();
        p.upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The port a URL means when it names none: PostgreSQL's and Redis's defaults. */
function portOf(url: URL): number {
  if (url.port) return Number(url.port);
  if (url.protocol.startsWith('redis')) return 6379;
  return 5432;
}

/** A silent proxy in front of a database or Redis URL's host and port, and the same URL through it
 *  (what a process under test is given; the test's own clients keep the direct URL). */
export async function silentProxyTo(url: string): Promise<{ proxy: SilentProxy; url: string }> {
  const target = new URL(url);
  const proxy = await startSilentProxy(portOf(target), target.hostname);
  target.port = String(proxy.port);
  return { proxy, url: target.toString() };
}
