// The console's building blocks without a server: escaping by construction, the base path, the
// auth header checks, the CSRF token and the origin check, and the chart's SVG.
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { authenticate, authFromEnv, Csrf, isLoopback, sameOrigin } from '../../src/console/auth.js';
import { lastHourChart } from '../../src/console/chart.js';
import { html, raw } from '../../src/console/html.js';
import { normalizeBasePath } from '../../src/console/server.js';

const req = (headers: Record<string, string>, remoteAddress = '127.0.0.1') => ({ headers, socket: { remoteAddress } }) as unknown as IncomingMessage;
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('console html', () => {
  it('escapes every interpolated value, nested templates and arrays included, but not raw()', () => {
    const evil = `<script>alert("x")</script>&'`;
    const out = html`<td title="${evil}">${evil}${[evil, html`<b>${evil}</b>`]}${raw('<i>ok</i>')}</td>`.text;
    expect(out).not.toContain('<script>');
    expect(out).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;');
    expect(out).toContain('<b>&lt;script&gt;');
    expect(out).toContain('<i>ok</i>');
    expect(html`${null}${undefined}${false}${0}`.text).toBe('0');
  });

  it('draws the last hour as bars and a lateness line, escaping nothing it did not make', () => {
    const minute = new Date('2026-11-23T04:00:00Z');
    const svg = lastHourChart([
      { minute, finished: 0, latenessP95: null, latenessMax: null },
      { minute: new Date(minute.getTime() + 60_000), finished: 120, latenessP95: 1.5, latenessMax: 2 },
    ]).text;
    expect(svg.match(/<rect /g)?.length).toBe(1);
    expect(svg).toContain('<polyline');
    expect(svg).toContain('04:01Z: 120 finished, p95 lateness 1.5s');
  });
});

describe('console base path', () => {
  it('normalizes and rejects what is not a path', () => {
    expect(normalizeBasePath('')).toBe('');
    expect(normalizeBasePath('/')).toBe('');
    expect(normalizeBasePath('tc/')).toBe('/tc');
    expect(normalizeBasePath('/ops/tc')).toBe('/ops/tc');
    expect(() => normalizeBasePath('/tc?x=<')).toThrow(/--base-path must be a URL path/);
  });
});

describe('console auth', () => {
  const auth = { token: 'a-token-of-enough-length', tokenName: 'ci', user: 'alice', password: 'correct horse' };

  it('accepts the right basic credentials or bearer token and names the actor', () => {
    expect(authenticate(req({ authorization: basic('alice', 'correct horse') }), auth)).toEqual({ ok: true, actor: 'alice' });
    expect(authenticate(req({ authorization: 'Bearer a-token-of-enough-length' }), auth)).toEqual({ ok: true, actor: 'token:ci' });
    expect(authenticate(req({ authorization: basic('alice', 'wrong') }), auth).ok).toBe(false);
    expect(authenticate(req({ authorization: basic('bob', 'correct horse') }), auth).ok).toBe(false);
    expect(authenticate(req({ authorization: 'Bearer nope' }), auth).ok).toBe(false);
    expect(authenticate(req({}), auth).ok).toBe(false);
    // No auth configured: open, the actor is the client address.
    expect(authenticate(req({}, '127.0.0.1'), { tokenName: 'token' })).toEqual({ ok: true, actor: 'anonymous@127.0.0.1' });
  });

  it('reads the environment and rejects half or weak settings', () => {
    expect(authFromEnv({ TC_CONSOLE_USER: 'ops', TC_CONSOLE_PASSWORD: 'long-enough' })).toMatchObject({ user: 'ops', password: 'long-enough' });
    expect(() => authFromEnv({ TC_CONSOLE_USER: 'ops' })).toThrow(/both TC_CONSOLE_USER and TC_CONSOLE_PASSWORD/);
    expect(() => authFromEnv({ TC_CONSOLE_TOKEN: 'short' })).toThrow(/at least 16 characters/);
  });

  it('CSRF tokens are per actor and per process; the origin must be this host', () => {
    const a = new Csrf();
    const b = new Csrf();
    expect(a.valid('alice', a.token('alice'))).toBe(true);
    expect(a.valid('bob', a.token('alice'))).toBe(false);
    expect(b.valid('alice', a.token('alice'))).toBe(false);
    expect(a.valid('alice', undefined)).toBe(false);
    expect(sameOrigin(req({ host: 'console:8080', origin: 'http://console:8080' }))).toBe(true);
    expect(sameOrigin(req({ host: 'console:8080', origin: 'https://evil.example' }))).toBe(false);
    expect(sameOrigin(req({ host: 'console:8080', origin: 'null' }))).toBe(false);
    expect(sameOrigin(req({ host: 'console:8080' }))).toBe(true); // no Origin: a script or curl
  });

  it('knows loopback addresses', () => {
    for (const h of ['127.0.0.1', '127.0.1.1', '::1', 'localhost']) expect(isLoopback(h)).toBe(true);
    for (const h of ['0.0.0.0', '::', '10.0.0.5', 'console']) expect(isLoopback(h)).toBe(false);
  });
});
