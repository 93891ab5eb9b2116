// The console's HTTP plumbing: request bodies (form or JSON), parameters, the input checks every
// route shares, and the security headers of every answer. No routes and no SQL here.
import { InputError } from '../input-error.js';
import type { FailedFilter } from '../operations/timeouts.js';

/** An answer other than 200, with the message the page or the JSON error shows. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export type Params = Record<string, string | string[]>;

/** A request as the routes see it: the path without the base path (and without /api). */
export interface ConsoleRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  actor: string;
  api: boolean;
  body: Params;
}

/** Largest request body the console takes (Fastify answers 413 beyond it). */
export const MAX_BODY = 256 * 1024;

/** How long a connection closed after an early answer (a body over the limit) still reads what
 *  the client sends, so the client reads the answer (api/close-in-stages.ts). */
export const CLOSE_LINGER_MS = 10_000;

export function formParams(text: string): Params {
  const out: Params = {};
  for (const [k, v] of new URLSearchParams(text)) {
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}

export function jsonParams(text: string): Params {
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

export const one = (p: Params, key: string): string | undefined => {
  const v = p[key];
  return Array.isArray(v) ? v[0] : v;
};
export const many = (p: Params, key: string): string[] => {
  const v = p[key];
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
};

export function positiveId(value: string, what: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1) throw new HttpError(400, `${what} must be a positive integer id, got "${value}"`);
  return n;
}

/** "" -> null (remove the limit); otherwise a number, checked by setKindLimits. */
export function limitValue(value: string | undefined): number | null | undefined {
  if (value === undefined) return undefined;
  if (value.trim() === '' || value.trim().toLowerCase() === 'none') return null;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new HttpError(400, `a limit must be a number or empty (no limit), got "${value}"`);
  return n;
}

export function failedFilter(p: { get(k: string): string | null | undefined }): FailedFilter {
  const scan = p.get('scan')?.trim();
  return {
    kind: p.get('kind') || undefined,
    scan: scan ? positiveId(scan, 'scan') : undefined,
    errorContains: p.get('error') || undefined,
  };
}

/** Every answer carries the same security headers (no framing, no sniffing, a strict CSP). */
export const SECURITY_HEADERS: Record<string, string> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
  'referrer-policy': 'same-origin',
};

/** Bad input from any layer (one base class, src/input-error.ts): 400 with its message. */
export function isInputError(err: unknown): boolean {
  return err instanceof InputError;
}
