// The console's HTTP server (node:http, no framework): authentication, the CSRF check, and the
// dispatch of each request to its route (routes.ts): the pages, their JSON API under /api, and the
// actions (form posts under /actions, JSON posts under /api). One handler per action serves both;
// a form post is answered with a redirect back to its page (303, so a reload does not post again)
// that shows the result once. Parsing and responses: http.ts.
//
// Mounting: with basePath "/tc" every link and form carries /tc; requests may arrive with the
// prefix (proxy passes the path through) or without it (proxy strips it).
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import { createKysely } from '../db/kysely.js';
import type { StoreDirectory } from '../stores/store-directory.js';
import { actionRoutes } from './action-routes.js';
import { authenticate, authEnabled, Csrf, isLoopback, sameOrigin, type AuthConfig } from './auth.js';
import { formParams, HttpError, isInputError, jsonParams, one, readBody, send, type Params } from './http.js';
import { messagePage, type PageContext } from './pages.js';
import { findRoute, pageRoutes } from './routes.js';
import { ConsoleStores } from './stores.js';

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
  /** With a config that names stores: their databases and the kinds (where a business object's
   *  timeout lives). The console then reads and acts across the center and every store. */
  stores?: { directory: StoreDirectory; kinds: Config['kinds'] } | undefined;
}

export interface ConsoleServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** A console that must not start as configured: the message says what to change. */
export class ConsoleConfigError extends Error {
  override name = 'ConsoleConfigError';
}

/** "/tc/", "tc" -> "/tc"; "/" or "" -> "". */
export function normalizeBasePath(value: string): string {
  const trimmed = value.trim().replace(/\/+$/, '');
  if (trimmed === '') return '';
  const path = trimmed.startsWith('/') ? trimmed : `/${trimmed}`;
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(path))
    throw new ConsoleConfigError(`--base-path must be a URL path such as /tc (letters, digits, . _ ~ -), got "${value}"`);
  return path;
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
  const routeDeps = { pool, db, lagSlaSeconds: options.lagSlaSeconds, stores };
  const pages = pageRoutes(routeDeps);
  const actions = actionRoutes(routeDeps);
  const csrf = new Csrf();
  const flashes = new Map<string, { ok: boolean; text: string; at: number }>();

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    let path = url.pathname;
    if (base && (path === base || path.startsWith(`${base}/`))) path = path.slice(base.length) || '/';
    // Probes answer without auth (they carry no data): /healthz the process, /readyz PostgreSQL.
    if (path === '/healthz') return send(res, 200, 'text/plain; charset=utf-8', 'ok\n');
    if (path === '/readyz') {
      try {
        await pool.query('SELECT 1');
        return send(res, 200, 'text/plain; charset=utf-8', 'ready\n');
      } catch (err) {
        return send(res, 503, 'text/plain; charset=utf-8', `PostgreSQL does not answer: ${(err as Error).message}\n`);
      }
    }
    const method = req.method ?? 'GET';
    const api = path.startsWith('/api/') || path === '/api';
    const auth = authenticate(req, options.auth);
    if (!auth.ok) {
      const challenge: Record<string, string> =
        options.auth.user !== undefined ? { 'www-authenticate': 'Basic realm="timeout-center console", charset="UTF-8"' } : {};
      return send(
        res,
        401,
        api ? 'application/json' : 'text/plain; charset=utf-8',
        api ? JSON.stringify({ error: auth.reason }) : `401: ${auth.reason}\n`,
        challenge,
      );
    }
    const ctx: PageContext = {
      base,
      actor: auth.actor,
      csrf: csrf.token(auth.actor),
      readOnly: options.readOnly,
      stores: stores.multi ? stores.names : undefined,
    };
    const flashId = url.searchParams.get('done');
    if (flashId) {
      const f = flashes.get(flashId);
      if (f) ctx.flash = { ok: f.ok, text: f.text };
    }
    const fail = (status: number, message: string) =>
      api
        ? send(res, status, 'application/json', JSON.stringify({ error: message }))
        : send(res, status, 'text/html; charset=utf-8', messagePage(ctx, status === 403 ? 'Refused' : 'Error', message));

    try {
      if (method === 'GET' || method === 'HEAD') {
        const pagePath = api ? path.slice(4) || '/' : path;
        const found = findRoute(pages, pagePath);
        if (!found) return fail(404, `no such page: ${path}`);
        const route = await found[0].read({ method, path: pagePath, query: url.searchParams, actor: auth.actor, api, body: {} }, ctx, found[1]);
        return api ? send(res, 200, 'application/json', JSON.stringify(route.json)) : send(res, 200, 'text/html; charset=utf-8', route.page());
      }
      if (method !== 'POST') return fail(405, `method ${method} is not allowed`);
      const actionPath = api ? path.slice(4) : path.startsWith('/actions/') ? path.slice(8) : null;
      if (actionPath === null) return fail(404, `no such action: ${path}`);
      if (options.readOnly) {
        return fail(403, 'this console is read-only (started with --read-only): actions are refused; use a console started without --read-only, or the CLI');
      }
      if (!sameOrigin(req)) return fail(403, 'refused: the request came from another site (Origin does not match this console)');
      const text = await readBody(req);
      let body: Params;
      if (api) {
        if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
          return fail(415, 'API actions take a JSON body: send Content-Type: application/json');
        }
        body = jsonParams(text);
      } else {
        body = formParams(text);
        if (!csrf.valid(auth.actor, one(body, '_csrf')))
          return fail(403, 'refused: the form is stale or did not come from this console (CSRF check); reload the page and try again');
      }
      const back = one(body, 'back');
      const backPath = back && back.startsWith('/') && !back.startsWith('//') ? back : '/';
      const redirect = (ok: boolean, message: string) => {
        const id = randomUUID();
        flashes.set(id, { ok, text: message, at: Date.now() });
        for (const [k, v] of flashes) if (Date.now() - v.at > 300_000) flashes.delete(k);
        const target = new URL(backPath, 'http://console.invalid');
        target.searchParams.set('done', id);
        send(res, 303, 'text/plain; charset=utf-8', '', { location: `${base}${target.pathname}${target.search}` });
      };
      try {
        const found = findRoute(actions, actionPath);
        if (!found) return fail(404, `no such action: ${path}`);
        const result = await found[0].act({ method, path: actionPath, query: url.searchParams, actor: auth.actor, api, body }, found[1]);
        logger.info({ actor: auth.actor, action: actionPath }, 'console action');
        return api ? send(res, 200, 'application/json', JSON.stringify(result.json)) : redirect(result.ok ?? true, result.text);
      } catch (err) {
        const status = err instanceof HttpError ? err.status : isInputError(err) ? 400 : 0;
        if (status === 0) throw err;
        return api ? fail(status, (err as Error).message) : redirect(false, (err as Error).message);
      }
    } catch (err) {
      if (err instanceof HttpError) return fail(err.status, err.message);
      if (isInputError(err)) return fail(400, (err as Error).message);
      logger.error({ err, path }, 'console request failed');
      return fail(500, `internal error: ${(err as Error).message}`);
    }
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      logger.error({ err }, 'console response failed');
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new ConsoleConfigError(
          `cannot serve the console on ${options.host}:${options.port}: ${err.code === 'EADDRINUSE' ? 'the port is in use' : err.message}`,
        ),
      ),
    );
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const hostForUrl = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${hostForUrl}:${port}${base}/`;
  logger.info({ url, port, readOnly: options.readOnly, auth: authEnabled(options.auth) ? 'on' : 'off' }, 'console listening');
  return {
    url,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
