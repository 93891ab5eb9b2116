// The console's HTTP server, on Fastify like the HTTP API (src/api/): one HTTP stack for the
// product. Fastify takes the requests (body limit, parsing, errors, the base path) and the hooks
// authenticate; the console's own table of pages and actions (routes.ts, action-routes.ts) is
// dispatched from four Fastify routes: pages (GET, HEAD), their JSON under /api, and the actions
// (form posts under /actions, JSON posts under /api). One handler per action serves both; a form
// post is answered with a redirect back to its page (303, so a reload does not post again) that
// shows the result once. Parameters and headers: http.ts.
//
// Mounting: with basePath "/tc" every link and form carries /tc; requests may arrive with the
// prefix (proxy passes the path through) or without it (proxy strips it).
import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { HorizonLimits } from '../operations/vacuum-horizon.js';
import { createKysely } from '../db/kysely.js';
import type { StoreDirectory } from '../stores/store-directory.js';
import { closeConnectionsInStages } from '../api/close-in-stages.js';
import { actionRoutes } from './action-routes.js';
import { authenticate, authEnabled, Csrf, isLoopback, sameOrigin, type AuthConfig } from './auth.js';
import { CLOSE_LINGER_MS, formParams, HttpError, isInputError, jsonParams, MAX_BODY, one, SECURITY_HEADERS, type Params } from './http.js';
import { messagePage, type PageContext } from './pages.js';
import { findRoute, pageRoutes } from './routes.js';
import { ConsoleStores } from './stores.js';
import { ConsoleConfigError, normalizeBasePath } from './base-path.js';

export { ConsoleConfigError, normalizeBasePath };

export interface ConsoleOptions {
  /** The console's own pool (a few connections; it never shares the worker's). */
  pool: pg.Pool;
  logger: Logger;
  host: string;
  port: number;
  /** "" or a path like "/tc" (no trailing slash). */
  basePath: string;
  readOnly: boolean;
  auth: AuthConfig;
  /** Serve without auth on a non-loopback address (the operator said so explicitly). */
  allowUnauthenticated: boolean;
  lagSlaSeconds: number;
  /** When a vacuum horizon holder is worth a warning (default: HORIZON_DEFAULTS). */
  horizon?: HorizonLimits | undefined;
  /** With a config that names stores: their databases and the kinds (where a business object's
   *  timeout lives). The console then reads and acts across the center and every store. */
  stores?: { directory: StoreDirectory; kinds: Config['kinds'] } | undefined;
}

export interface ConsoleServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

export async function startConsole(options: ConsoleOptions): Promise<ConsoleServer> {
  const base = normalizeBasePath(options.basePath);
  if (!authEnabled(options.auth) && !isLoopback(options.host) && !options.allowUnauthenticated) {
    throw new ConsoleConfigError(
      `refusing to serve the console on ${options.host} without authentication: set TC_CONSOLE_TOKEN, or TC_CONSOLE_USER and TC_CONSOLE_PASSWORD, ` +
        'or bind a loopback address (--host 127.0.0.1), or pass --allow-unauthenticated if a proxy in front authenticates',
    );
  }
  const { pool, logger } = options;
  const db = createKysely(pool);
  const stores = new ConsoleStores({ pool, db }, options.stores?.directory, options.stores?.kinds);
  const routeDeps = { pool, db, lagSlaSeconds: options.lagSlaSeconds, horizon: options.horizon, stores };
  const pages = pageRoutes(routeDeps);
  const actions = actionRoutes(routeDeps);
  const csrf = new Csrf();
  const flashes = new Map<string, { ok: boolean; text: string; at: number }>();

  const app = Fastify({
    loggerInstance: logger.child({ component: 'console' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: MAX_BODY,
    // Requests may arrive with the base path (a proxy passes it through) or without (it strips it).
    rewriteUrl: (req) => {
      const url = req.url ?? '/';
      return base && (url === base || url.startsWith(`${base}/`) || url.startsWith(`${base}?`)) ? url.slice(base.length) || '/' : url;
    },
  });
  // A body over the limit is answered 413 before it is read and the connection closed: in stages,
  // so a browser still sending it reads the answer.
  closeConnectionsInStages(app.server, CLOSE_LINGER_MS);
  // Bodies reach the handlers as text: a form or JSON, parsed by the console's own rules (http.ts).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body));

  const send = (reply: FastifyReply, status: number, type: string, body: string, headers: Record<string, string> = {}) =>
    reply
      .code(status)
      .headers({ ...SECURITY_HEADERS, 'content-type': type, ...headers })
      .send(body);
  const isApi = (path: string) => path.startsWith('/api/') || path === '/api';
  const pathOf = (req: FastifyRequest) => new URL(req.url, 'http://console.invalid').pathname;
  const actors = new WeakMap<FastifyRequest, string>();

  const context = (req: FastifyRequest): PageContext => {
    const actor = actors.get(req)!;
    const ctx: PageContext = { base, actor, csrf: csrf.token(actor), readOnly: options.readOnly, stores: stores.multi ? stores.names : undefined };
    const flashId = new URL(req.url, 'http://console.invalid').searchParams.get('done');
    const f = flashId ? flashes.get(flashId) : undefined;
    if (f) ctx.flash = { ok: f.ok, text: f.text };
    return ctx;
  };
  const fail = (req: FastifyRequest, reply: FastifyReply, status: number, message: string) =>
    isApi(pathOf(req))
      ? send(reply, status, 'application/json', JSON.stringify({ error: message }))
      : send(reply, status, 'text/html; charset=utf-8', messagePage(context(req), status === 403 ? 'Refused' : 'Error', message));

  // Probes answer without auth (they carry no data): /healthz the process, /readyz PostgreSQL.
  const probes = new Set(['/healthz', '/readyz']);
  app.get('/healthz', (_req, reply) => send(reply, 200, 'text/plain; charset=utf-8', 'ok\n'));
  app.get('/readyz', async (_req, reply) => {
    try {
      await pool.query('SELECT 1');
      return send(reply, 200, 'text/plain; charset=utf-8', 'ready\n');
    } catch (err) {
      return send(reply, 503, 'text/plain; charset=utf-8', `PostgreSQL does not answer: ${(err as Error).message}\n`);
    }
  });

  // Authentication before anything is read.
  app.addHook('onRequest', async (req, reply) => {
    const path = pathOf(req);
    if (probes.has(path)) return;
    const auth = authenticate(req.raw, options.auth);
    if (auth.ok) {
      actors.set(req, auth.actor);
      return;
    }
    const api = isApi(path);
    const challenge: Record<string, string> =
      options.auth.user !== undefined ? { 'www-authenticate': 'Basic realm="timeout-center console", charset="UTF-8"' } : {};
    return send(
      reply,
      401,
      api ? 'application/json' : 'text/plain; charset=utf-8',
      api ? JSON.stringify({ error: auth.reason }) : `401: ${auth.reason}\n`,
      challenge,
    );
  });

  app.get('/*', async (req, reply) => {
    const path = pathOf(req);
    const api = isApi(path);
    const ctx = context(req);
    const pagePath = api ? path.slice(4) || '/' : path;
    const found = findRoute(pages, pagePath);
    if (!found) return fail(req, reply, 404, `no such page: ${path}`);
    const query = new URL(req.url, 'http://console.invalid').searchParams;
    const route = await found[0].read({ method: req.method, path: pagePath, query, actor: ctx.actor, api, body: {} }, ctx, found[1]);
    return api ? send(reply, 200, 'application/json', JSON.stringify(route.json)) : send(reply, 200, 'text/html; charset=utf-8', route.page());
  });

  app.post('/*', async (req, reply) => {
    const path = pathOf(req);
    const api = isApi(path);
    const ctx = context(req);
    const actionPath = api ? path.slice(4) : path.startsWith('/actions/') ? path.slice(8) : null;
    if (actionPath === null) return fail(req, reply, 404, `no such action: ${path}`);
    if (options.readOnly) {
      return fail(
        req,
        reply,
        403,
        'this console is read-only (started with --read-only): actions are refused; use a console started without --read-only, or the CLI',
      );
    }
    if (!sameOrigin(req.raw)) return fail(req, reply, 403, 'refused: the request came from another site (Origin does not match this console)');
    const text = typeof req.body === 'string' ? req.body : '';
    let body: Params;
    if (api) {
      if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
        return fail(req, reply, 415, 'API actions take a JSON body: send Content-Type: application/json');
      }
      body = jsonParams(text);
    } else {
      body = formParams(text);
      if (!csrf.valid(ctx.actor, one(body, '_csrf')))
        return fail(req, reply, 403, 'refused: the form is stale or did not come from this console (CSRF check); reload the page and try again');
    }
    const back = one(body, 'back');
    const backPath = back && back.startsWith('/') && !back.startsWith('//') ? back : '/';
    const redirect = (ok: boolean, message: string) => {
      const id = randomUUID();
      flashes.set(id, { ok, text: message, at: Date.now() });
      for (const [k, v] of flashes) if (Date.now() - v.at > 300_000) flashes.delete(k);
      const target = new URL(backPath, 'http://console.invalid');
      target.searchParams.set('done', id);
      return send(reply, 303, 'text/plain; charset=utf-8', '', { location: `${base}${target.pathname}${target.search}` });
    };
    try {
      const found = findRoute(actions, actionPath);
      if (!found) return fail(req, reply, 404, `no such action: ${path}`);
      const query = new URL(req.url, 'http://console.invalid').searchParams;
      const result = await found[0].act({ method: req.method, path: actionPath, query, actor: ctx.actor, api, body }, found[1]);
      logger.info({ actor: ctx.actor, action: actionPath }, 'console action');
      return api ? send(reply, 200, 'application/json', JSON.stringify(result.json)) : redirect(result.ok ?? true, result.text);
    } catch (err) {
      const status = err instanceof HttpError ? err.status : isInputError(err) ? 400 : 0;
      if (status === 0) throw err;
      return api ? fail(req, reply, status, (err as Error).message) : redirect(false, (err as Error).message);
    }
  });

  app.route({
    method: ['PUT', 'DELETE', 'PATCH', 'OPTIONS'],
    url: '/*',
    handler: (req, reply) => fail(req, reply, 405, `method ${req.method} is not allowed`),
  });

  app.setErrorHandler((err, req, reply) => {
    const e = err as { code?: string; statusCode?: number; message: string };
    if (err instanceof HttpError) return fail(req, reply, err.status, err.message);
    if (isInputError(err)) return fail(req, reply, 400, e.message);
    if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return fail(req, reply, 413, 'request body too large');
    if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return fail(req, reply, e.statusCode, e.message);
    logger.error({ err, path: pathOf(req) }, 'console request failed');
    return fail(req, reply, 500, `internal error: ${e.message}`);
  });

  try {
    await app.listen({ host: options.host, port: options.port });
  } catch (err) {
    await app.close();
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConsoleConfigError(
      `cannot serve the console on ${options.host}:${options.port}: ${code === 'EADDRINUSE' ? 'the port is in use' : (err as Error).message}`,
    );
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const hostForUrl = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${hostForUrl}:${port}${base}/`;
  logger.info({ url, port, readOnly: options.readOnly, auth: authEnabled(options.auth) ? 'on' : 'off' }, 'console listening');
  return {
    url,
    port,
    close: async () => {
      app.server.closeAllConnections();
      await app.close();
    },
  };
}
