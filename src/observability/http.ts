// /metrics, /healthz (the process answers) and /readyz (its dependencies answer), one small
// node:http server per process.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Metrics } from './metrics.js';

export type ReadinessCheck = () => Promise<Record<string, unknown>>;

export interface HealthServer {
  port: number;
  close(): Promise<void>;
}

/** Each check resolves with details or throws; /readyz is 200 only when all resolve. */
export async function startHealthServer(options: {
  port: number;
  metrics: Metrics;
  checks: Record<string, ReadinessCheck>;
  logger: Logger;
}): Promise<HealthServer> {
  const server: Server = createServer((req, res) => {
    const url = req.url?.split('?')[0];
    if (url === '/metrics') {
      options.metrics.registry
        .metrics()
        .then((body) => {
          res.writeHead(200, { 'content-type': options.metrics.registry.contentType });
          res.end(body);
        })
        .catch((err: Error) => {
          res.writeHead(500).end(err.message);
        });
      return;
    }
    if (url === '/healthz') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
      return;
    }
    if (url === '/readyz') {
      void readiness(options.checks).then(({ ok, body }) => {
        res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      });
      return;
    }
    res.writeHead(404).end('not found: try /metrics, /healthz or /readyz\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  options.logger.info({ port }, 'serving /metrics, /healthz, /readyz');
  return {
    port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function readiness(checks: Record<string, ReadinessCheck>): Promise<{ ok: boolean; body: Record<string, unknown> }> {
  const body: Record<string, unknown> = {};
  let ok = true;
  await Promise.all(
    Object.entries(checks).map(async ([name, check]) => {
      try {
        body[name] = await withTimeout(check(), 2000);
      } catch (err) {
        ok = false;
        body[name] = { ok: false, error: (err as Error).message };
      }
    }),
  );
  return { ok, body: { status: ok ? 'ready' : 'not ready', ...body } };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
