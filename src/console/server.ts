// The console's HTTP server (node:http, no framework): the pages, their JSON API under /api, and
// the actions (form posts under /actions, JSON posts under /api). One handler per action serves
// both; a form post is answered with a redirect back to its page (303, so a reload does not post
// again) that shows the result once.
//
// Mounting: with basePath "/tc" every link and form carries /tc; requests may arrive with the
// prefix (proxy passes the path through) or without it (proxy strips it).
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import { createKysely } from '../db/kysely.js';
import type { Database } from '../db/schema.js';
import { ControlInputError, listKindControls, pauseKind, resumeKind, setKindLimits } from '../flow/kind-controls.js';
import { listTargetControls, setTargetRateLimit } from '../flow/target-controls.js';
import { listAudit } from '../operations/audit.js';
import { kindBacklog, lastHour, leader, liveWorkers, openBreakers, type MinutePoint } from '../operations/overview.js';
import { getScan, listScans, RerunRefused, rerunShard } from '../operations/scans.js';
import { cancelAudited, listFailed, OperationInputError, rescheduleAudited, retryAudited, timeoutHistory, type FailedFilter } from '../operations/timeouts.js';
import { collectWarnings } from '../operations/warnings.js';
import { TimeoutInputError } from '../schedule.js';
import { authenticate, authEnabled, Csrf, isLoopback, sameOrigin, type AuthConfig } from './auth.js';
import {
  auditPage,
  failedPage,
  kindsPage,
  messagePage,
  overviewPage,
  scanPage,
  scansPage,
  timeoutsPage,
  warningsPage,
  type KindRow,
  type PageContext,
} from './pages.js';

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

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

type Params = Record<string, string | string[]>;

interface Request {
  method: string;
  path: string;
  query: URLSearchParams;
  actor: string;
  api: boolean;
  body: Params;
}

const MAX_BODY = 256 * 1024;

async function readBody(req: IncomingMessage): Promise<string> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new HttpError(413, 'request body too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function formParams(text: string): Params {
  const out: Params = {};
  for (const [k, v] of new URLSearchParams(text)) {
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}

function jsonParams(text: string): Params {
  if (text.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new HttpError(400, 'the body is not valid JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new HttpError(400, 'the body must be a JSON object');
  const out: Params = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (v === null || v === undefined) out[k] = '';
    else if (Array.isArray(v)) out[k] = v.map(String);
    else out[k] = String(v);
  }
  return out;
}

const one = (p: Params, key: string): string | undefined => {
  const v = p[key];
  return Array.isArray(v) ? v[0] : v;
};
const many = (p: Params, key: string): string[] => {
  const v = p[key];
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
};

function positiveId(value: string, what: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1) throw new HttpError(400, `${what} must be a positive integer id, got "${value}"`);
  return n;
}

/** "" -> null (remove the limit); otherwise a number, checked by setKindLimits. */
function limitValue(value: string | undefined): number | null | undefined {
  if (value === undefined) return undefined;
  if (value.trim() === '' || value.trim().toLowerCase() === 'none') return null;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new HttpError(400, `a limit must be a number or empty (no limit), got "${value}"`);
  return n;
}

function failedFilter(p: { get(k: string): string | null | undefined }): FailedFilter {
  const scan = p.get('scan')?.trim();
  return {
    kind: p.get('kind') || undefined,
    scan: scan ? positiveId(scan, 'scan') : undefined,
    errorContains: p.get('error') || undefined,
  };
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
  const db: Kysely<Database> = createKysely(pool);
  const csrf = new Csrf();
  const flashes = new Map<string, { ok: boolean; text: string; at: number }>();

  const kindNames = async () => (await pool.query<{ kind: string }>('SELECT kind FROM timeout_center.kinds ORDER BY kind')).rows.map((r) => r.kind);

  const kindRows = async (): Promise<KindRow[]> => {
    const [controls, settings] = await Promise.all([
      listKindControls(pool),
      pool.query<{ kind: string; shardSize: number; maxAttempts: number; backoffMs: number; handlerType: string; description: string | null }>(
        `SELECT kind, shard_size AS "shardSize", max_attempts AS "maxAttempts", backoff_ms AS "backoffMs", handler_type AS "handlerType", description
           FROM timeout_center.kinds`,
      ),
    ]);
    const byKind = new Map(settings.rows.map((r) => [r.kind, r]));
    return controls.map((c) => ({ ...c, ...byKind.get(c.kind)! }));
  };

  // The chart reads an hour of finished timeouts (millions under a flood): computed at most once
  // per 10 s whatever the number of open overview pages.
  let hourCache: { at: number; points: Promise<MinutePoint[]> } | undefined;
  const lastHourCached = () => {
    if (!hourCache || Date.now() - hourCache.at > 10_000) {
      const points = lastHour(pool);
      hourCache = { at: Date.now(), points };
      points.catch(() => (hourCache = undefined));
    }
    return hourCache.points;
  };

  const overviewData = async () => {
    const [backlog, lead, workers, hour, breakers, warnings] = await Promise.all([
      kindBacklog(pool),
      leader(pool),
      liveWorkers(pool),
      lastHourCached(),
      openBreakers(pool),
      collectWarnings(pool, { lagSlaSeconds: options.lagSlaSeconds }),
    ]);
    return { backlog, leader: lead, workers, lastHour: hour, breakers, warnings: warnings.warnings };
  };

  // Reads: [JSON for /api, HTML page] per path.
  async function get(r: Request, ctx: PageContext): Promise<{ json: unknown; page: () => string } | null> {
    const q = r.query;
    if (r.path === '/' || r.path === '' || r.path === '/overview') {
      const d = await overviewData();
      return { json: d, page: () => overviewPage(ctx, d) };
    }
    if (r.path === '/kinds') {
      const [kinds, databases] = await Promise.all([kindRows(), listTargetControls(pool)]);
      return { json: kinds, page: () => kindsPage(ctx, kinds, databases) };
    }
    if (r.path === '/databases') {
      // Business databases and their fleet-wide rate limits (shown on the kinds page).
      const [kinds, databases] = await Promise.all([kindRows(), listTargetControls(pool)]);
      return { json: databases, page: () => kindsPage(ctx, kinds, databases) };
    }
    if (r.path === '/scans') {
      const limitText = q.get('limit');
      const limit = limitText ? Math.min(positiveId(limitText, 'limit'), 1000) : 50;
      const scans = await listScans(pool, { limit, kind: q.get('kind') || undefined });
      return { json: scans, page: () => scansPage(ctx, scans) };
    }
    const scanMatch = /^\/scans\/([^/]+)$/.exec(r.path);
    if (scanMatch) {
      const scanId = positiveId(decodeURIComponent(scanMatch[1]!), 'scan id');
      const found = await getScan(pool, scanId);
      if (!found) throw new HttpError(404, `scan ${scanId} does not exist (never created, or purged by retention)`);
      return { json: found, page: () => scanPage(ctx, found.scan, found.shards) };
    }
    if (r.path === '/timeouts') {
      const kind = q.get('kind') || undefined;
      const bizId = q.get('bizId')?.trim() || undefined;
      const kinds = await kindNames();
      const rows = kind && bizId ? await timeoutHistory(pool, kind, bizId) : null;
      return { json: rows ?? [], page: () => timeoutsPage(ctx, kinds, { kind, bizId }, rows) };
    }
    if (r.path === '/failed') {
      const filter = failedFilter(q);
      const [kinds, found] = await Promise.all([kindNames(), listFailed(pool, filter, 200)]);
      return { json: found, page: () => failedPage(ctx, kinds, filter, found.total, found.rows) };
    }
    if (r.path === '/warnings') {
      const report = await collectWarnings(pool, { lagSlaSeconds: options.lagSlaSeconds });
      return { json: report, page: () => warningsPage(ctx, report, options.lagSlaSeconds) };
    }
    if (r.path === '/audit') {
      const entries = await listAudit(pool, { limit: 200, kind: q.get('kind') || undefined, action: q.get('action') || undefined });
      return { json: entries, page: () => auditPage(ctx, entries) };
    }
    return null;
  }

  // Actions: each returns what it did, as JSON and as one line for the page.
  async function act(r: Request): Promise<{ json: unknown; text: string } | null> {
    const p = r.body;
    const kindAction = /^\/kinds\/([^/]+)\/(pause|resume|limit)$/.exec(r.path);
    if (kindAction) {
      const kind = decodeURIComponent(kindAction[1]!);
      const verb = kindAction[2]!;
      if (verb === 'pause') return { json: await pauseKind(pool, kind, r.actor), text: `paused ${kind}: nothing of it starts until it is resumed` };
      if (verb === 'resume') return { json: await resumeKind(pool, kind, r.actor), text: `resumed ${kind}` };
      const controls = await setKindLimits(
        pool,
        kind,
        { maxRunningShards: limitValue(one(p, 'maxRunningShards')), rateLimit: limitValue(one(p, 'rateLimit')) },
        r.actor,
      );
      return {
        json: controls,
        text: `${kind}: at most ${controls.maxRunningShards ?? 'any number of'} running shards, ${controls.rateLimit === null ? 'no rate limit' : `${controls.rateLimit} timeouts/s`}`,
      };
    }
    const databaseLimit = /^\/databases\/([^/]+)\/limit$/.exec(r.path);
    if (databaseLimit) {
      const target = decodeURIComponent(databaseLimit[1]!);
      const rate = limitValue(one(p, 'rateLimit'));
      if (rate === undefined) throw new HttpError(400, 'give rateLimit: timeouts per second, or empty for no limit');
      const controls = await setTargetRateLimit(pool, target, rate, r.actor);
      return {
        json: controls,
        text: `database ${target}: ${controls.rateLimit === null ? 'no rate limit' : `at most ${controls.rateLimit} timeouts/s over all its kinds`}`,
      };
    }
    const rerun = /^\/shards\/([^/]+)\/rerun$/.exec(r.path);
    if (rerun) {
      const shardId = positiveId(decodeURIComponent(rerun[1]!), 'shard id');
      const result = await rerunShard(db, shardId, r.actor);
      return {
        json: result,
        text: `shard ${shardId}: ${result.retried} failed timeout(s) back to pending${result.left ? `, ${result.left} left alone (a live timeout exists for the object)` : ''}`,
      };
    }
    if (r.path === '/timeouts/cancel' || r.path === '/timeouts/reschedule') {
      const kind = one(p, 'kind') ?? '';
      const bizId = one(p, 'bizId')?.trim() ?? '';
      if (!kind || !bizId) throw new HttpError(400, 'give a kind and a business id (bizId)');
      if (r.path === '/timeouts/cancel') {
        const done = await cancelAudited(db, kind, bizId, r.actor);
        if (!done)
          throw new HttpError(
            409,
            `${kind} ${bizId} has no pending timeout to cancel (too late: a worker holds it, or it is already done, failed or cancelled; or never scheduled)`,
          );
        return { json: { kind, bizId, cancelled: true }, text: `cancelled the live ${kind} timeout of ${bizId}` };
      }
      const dueText = one(p, 'dueAt')?.trim() ?? '';
      const dueAt = new Date(dueText);
      if (!dueText || Number.isNaN(dueAt.getTime())) throw new HttpError(400, `dueAt must be a date and time such as 2026-11-23T08:00:00Z, got "${dueText}"`);
      const moved = await rescheduleAudited(db, kind, bizId, dueAt, r.actor);
      if (!moved) throw new HttpError(409, `${kind} ${bizId} has no pending timeout (an in-flight one is being applied now and cannot move)`);
      return { json: { kind, bizId, dueAt }, text: `moved ${kind} ${bizId} to ${dueAt.toISOString()}` };
    }
    if (r.path === '/failed/retry') {
      const single = one(p, 'one');
      const ids = (single ? [single] : many(p, 'id'))
        .flatMap((v) => v.split(','))
        .filter((v) => v.trim() !== '')
        .map((v) => positiveId(v, 'timeout id'));
      let selector;
      if (ids.length > 0) selector = { id: ids };
      // A form says "all matching" explicitly; an API call names its filter (kind, scan, error).
      else if (one(p, 'all') === '1' || (r.api && (one(p, 'kind') || one(p, 'scan') || one(p, 'error')))) {
        const f = failedFilter({ get: (k: string) => one(p, k) });
        selector = { kind: f.kind, scan: f.scan, errorContains: f.errorContains, id: undefined };
        // "All matching" with no filter is every failed timeout: allowed, but only when asked for.
        if (!f.kind && !f.scan && !f.errorContains) {
          const kinds = await kindNames();
          const results = [];
          for (const kind of kinds) results.push(await retryAudited(db, { kind }, r.actor));
          const retried = results.reduce((a, b) => a + b.retried, 0);
          const left = results.reduce((a, b) => a + b.left, 0);
          return { json: { retried, left }, text: `retried ${retried} failed timeout(s)${left ? `; left ${left} alone` : ''}` };
        }
      } else throw new HttpError(400, 'select failed timeouts to retry (tick them), or use "retry all matching"');
      const result = await retryAudited(db, selector, r.actor);
      if (result.matched === 0) throw new HttpError(409, 'no failed timeouts match (nothing changed): already retried?');
      return {
        json: result,
        text: `retried ${result.retried} failed timeout(s)${result.left ? `; left ${result.left} alone: its object already has a live timeout, or a newer failed one` : ''}${result.notFailed.length ? `; not failed: ${result.notFailed.join(', ')}` : ''}`,
      };
    }
    return null;
  }

  function send(res: ServerResponse, status: number, type: string, body: string, headers: Record<string, string> = {}) {
    res.writeHead(status, {
      'content-type': type,
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
      'referrer-policy': 'same-origin',
      ...headers,
    });
    res.end(body);
  }

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
    const ctx: PageContext = { base, actor: auth.actor, csrf: csrf.token(auth.actor), readOnly: options.readOnly };
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
        const route = await get({ method, path: api ? path.slice(4) || '/' : path, query: url.searchParams, actor: auth.actor, api, body: {} }, ctx);
        if (!route) return fail(404, `no such page: ${path}`);
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
        const result = await act({ method, path: actionPath, query: url.searchParams, actor: auth.actor, api, body });
        if (!result) return fail(404, `no such action: ${path}`);
        logger.info({ actor: auth.actor, action: actionPath }, 'console action');
        return api ? send(res, 200, 'application/json', JSON.stringify(result.json)) : redirect(true, result.text);
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

function isInputError(err: unknown): boolean {
  return err instanceof ControlInputError || err instanceof OperationInputError || err instanceof RerunRefused || err instanceof TimeoutInputError;
}
