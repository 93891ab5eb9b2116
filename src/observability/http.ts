// /metrics, /healthz (the process answers) and /readyz (its dependencies answer), one small server
// per process, on Fastify like the API and the console (one HTTP stack).
import Fastify, { LogController, type FastifyBaseLogger } from 'fastify';
import type { Logger } from 'pino';
import type { Metrics } from './metrics.js';
import { within } from '../bounded.js';

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
  const app = Fastify({
    loggerInstance: options.logger.child({ component: 'http' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
  });
  app.get('/metrics', async (_req, reply) => {
    try {
      const body = await options.metrics.registry.metrics();
      return reply.type(options.metrics.registry.contentType).send(body);
    } catch (err) {
      return reply
        .code(500)
        .type('text/plain')
        .send((err as Error).message);
    }
  });
  app.get('/healthz', (_req, reply) => reply.type('application/json').send('{"status":"ok"}'));
  app.get('/readyz', async (_req, reply) => {
    const { ok, body } = await readiness(options.checks);
    return reply
      .code(ok ? 200 : 503)
      .type('application/json')
      .send(JSON.stringify(body));
  });
  app.setNotFoundHandler((_req, reply) => reply.code(404).type('text/plain').send('not found: try /metrics, /healthz or /readyz\n'));
  // Every address, as node:http's listen(port) did: IPv6 and IPv4 where the host has IPv6, else IPv4.
  try {
    await app.listen({ port: options.port, host: '::' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EAFNOSUPPORT' && (err as NodeJS.ErrnoException).code !== 'EADDRNOTAVAIL') throw err;
    await app.listen({ port: options.port, host: '0.0.0.0' });
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  options.logger.info({ port }, 'serving /metrics, /healthz, /readyz');
  return {
    port,
    close: () => app.close(),
  };
}

/** How long /ready waits for each check: a probe must answer before its own timeout. */
const READINESS_BOUND_MS = 2000;

async function readiness(checks: Record<string, ReadinessCheck>): Promise<{ ok: boolean; body: Record<string, unknown> }> {
  const body: Record<string, unknown> = {};
  let ok = true;
  await Promise.all(
    Object.entries(checks).map(async ([name, check]) => {
      try {
        body[name] = await within(check(), READINESS_BOUND_MS, `no answer within ${READINESS_BOUND_MS} ms`);
      } catch (err) {
        ok = false;
        body[name] = { ok: false, error: (err as Error).message };
      }
    }),
  );
  return { ok, body: { status: ok ? 'ready' : 'not ready', ...body } };
}
