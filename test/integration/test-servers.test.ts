// The test helpers' own PostgreSQL servers: a crash (stop -m immediate) the fault tests rely on
// must end within seconds whatever clients do meanwhile. PostgreSQL 15's postmaster never signals
// a "dead-end" child (one forked to refuse a connection that arrived during the shutdown), which
// waits up to authentication_timeout (60 s) for the client's startup packet; a Citus peer's
// half-open connection held a worker node's stop past the helpers' 60 s bound in CI.
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { startPostgres, stopAllServers } from '../helpers/servers.js';
import { sleep } from '../faults/harness.js';

afterAll(async () => {
  await stopAllServers();
});

describe('the helpers’ PostgreSQL servers', () => {
  it('stop -m immediate ends within 15 s while clients connect and never send their startup packet', async () => {
    const server = await startPostgres();
    const sockets: net.Socket[] = [];
    let connecting = true;
    // Clients that open a connection and say nothing, before and all through the shutdown.
    const opener = (async () => {
      while (connecting) {
        const s = net.connect({ host: '127.0.0.1', port: server.port });
        s.on('error', () => {});
        sockets.push(s);
        await sleep(5);
      }
    })();
    await sleep(100);
    const started = Date.now();
    const stopping = server.stopImmediately();
    await sleep(500);
    connecting = false;
    await opener;
    await stopping;
    const tookMs = Date.now() - started;
    for (const s of sockets) s.destroy();
    console.log(`[fault-report] immediate stop with ${sockets.length} silent clients: ${tookMs} ms`);
    expect(tookMs).toBeLessThan(15_000);
    // And it starts again, crash recovery and all.
    await server.start();
    await server.stop();
  }, 120_000);
});
