// Who may use the console, and proof that a form post came from the console's own page.
//
// Authentication (either or both, from the environment or a mounted secret):
// - a bearer token (TC_CONSOLE_TOKEN; its name in the audit log TC_CONSOLE_TOKEN_NAME, default
//   "token"): `Authorization: Bearer <token>`, for scripts and proxies that add the header;
// - basic auth (TC_CONSOLE_USER + TC_CONSOLE_PASSWORD): the browser asks once and resends it.
// Secrets are compared in constant time. Without either the console is open, which `serve`
// allows only on a loopback address unless the operator says so explicitly.
//
// CSRF: basic auth is an ambient credential (the browser sends it with any request to the
// origin), so a form post must carry a token that only a page of this console can know: an HMAC
// of the actor under a key drawn when the process starts. JSON API posts need no token: a
// cross-origin page cannot send Content-Type: application/json without a CORS preflight, which
// the console never grants. A post whose Origin header names another host is refused as well.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

export interface AuthConfig {
  token?: string | undefined;
  tokenName: string;
  user?: string | undefined;
  password?: string | undefined;
}

export class AuthConfigError extends Error {
  override name = 'AuthConfigError';
}

/** Reads TC_CONSOLE_TOKEN / TC_CONSOLE_TOKEN_NAME / TC_CONSOLE_USER / TC_CONSOLE_PASSWORD. */
export function authFromEnv(env: NodeJS.ProcessEnv = process.env): AuthConfig {
  const token = env['TC_CONSOLE_TOKEN'] || undefined;
  const user = env['TC_CONSOLE_USER'] || undefined;
  const password = env['TC_CONSOLE_PASSWORD'] || undefined;
  if ((user === undefined) !== (password === undefined)) {
    throw new AuthConfigError('set both TC_CONSOLE_USER and TC_CONSOLE_PASSWORD for basic auth (one of them is missing)');
  }
  if (token !== undefined && token.length < 16) throw new AuthConfigError('TC_CONSOLE_TOKEN must be at least 16 characters (e.g. `openssl rand -hex 24`)');
  if (password !== undefined && password.length < 8) throw new AuthConfigError('TC_CONSOLE_PASSWORD must be at least 8 characters');
  return { token, tokenName: env['TC_CONSOLE_TOKEN_NAME'] || 'token', user, password };
}

export function authEnabled(auth: AuthConfig): boolean {
  return auth.token !== undefined || auth.user !== undefined;
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export type AuthResult = { ok: true; actor: string } | { ok: false; reason: string };

/** The actor for the audit log ("alice", "token:deploy-bot", "anonymous@127.0.0.1"), or why not. */
export function authenticate(req: IncomingMessage, auth: AuthConfig): AuthResult {
  if (!authEnabled(auth)) return { ok: true, actor: `anonymous@${req.socket.remoteAddress ?? 'unknown'}` };
  const header = req.headers.authorization ?? '';
  const [scheme, value = ''] = header.split(/\s+/, 2);
  if (auth.token !== undefined && scheme?.toLowerCase() === 'bearer') {
    return same(value, auth.token) ? { ok: true, actor: `token:${auth.tokenName}` } : { ok: false, reason: 'wrong bearer token' };
  }
  if (auth.user !== undefined && scheme?.toLowerCase() === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    const user = decoded.slice(0, colon);
    const password = decoded.slice(colon + 1);
    // Both compared, always: no early exit that tells which one was wrong.
    const okUser = same(user, auth.user);
    const okPassword = same(password, auth.password!);
    return colon >= 0 && okUser && okPassword ? { ok: true, actor: user } : { ok: false, reason: 'wrong user or password' };
  }
  return { ok: false, reason: 'authentication required' };
}

export class Csrf {
  private readonly key = randomBytes(32);

  token(actor: string): string {
    return createHmac('sha256', this.key).update(actor).digest('base64url');
  }

  valid(actor: string, token: string | undefined): boolean {
    return token !== undefined && same(token, this.token(actor));
  }
}

/** False when the request names an Origin (or, lacking it, a Referer) of another host. */
export function sameOrigin(req: IncomingMessage): boolean {
  const source = req.headers.origin ?? req.headers.referer;
  if (!source || source === 'null') return source !== 'null';
  try {
    const host = req.headers['x-forwarded-host'] ?? req.headers.host;
    return new URL(source).host === String(host).split(',')[0]!.trim();
  } catch {
    return false;
  }
}

/** A loopback address: the console may run without auth only there (unless told otherwise). */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}
