// Every error answer of the HTTP API has one shape, {"error": {"code", "message", "field"?}}, with a
// stable code (schemas.ts ERROR_CODES) a program can branch on, and the request field at fault.
// This module turns whatever went wrong (Fastify's own errors for the body, the zod validation,
// an ApiError from a route, bad input from the business API) into that answer.
import type { FastifyError } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { isConnectionError } from '../db/pool.js';
import { InputError } from '../input-error.js';
import { MAX_BIZ_ID, MAX_PATH_PARAM, type ErrorBody, type ErrorCode } from './schemas.js';

export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

export function errorBody(code: ErrorCode, message: string, field?: string): ErrorBody {
  return { error: field === undefined ? { code, message } : { code, message, field } };
}

/** Fastify's error codes for a body it could not take, and ours for each. */
const FASTIFY: Record<string, [number, ErrorCode, string]> = {
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'body_too_large', 'the request body is larger than the limit'],
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'unsupported_media_type', 'send Content-Type: application/json'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'invalid_request', 'Content-Length does not match the body'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'malformed_json', 'the body is empty: send a JSON object'],
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'malformed_json', 'the body is not valid JSON'],
};

interface Issue {
  keyword?: string;
  instancePath: string;
  message?: string | undefined;
  params?: Record<string, unknown>;
}
interface ZodIssueLike {
  path: PropertyKey[];
  message: string;
  code: string;
  errors?: ZodIssueLike[][];
}

/** A union's failure (a timeout takes dueAt or delayMs, two closed shapes) told as the branch that
 *  came closest: its first issue, with the field it names (dueAt: year 10000, not "invalid input"). */
function closest(issue: Issue): Issue {
  const keys = issue.params?.['keys'];
  if (issue.keyword === 'unrecognized_keys' && Array.isArray(keys) && keys.length > 0) {
    const base = issue.instancePath.replace(/\/$/, '');
    const due = keys.every((k) => k === 'dueAt' || k === 'delayMs');
    return due
      ? { instancePath: `${base}/dueAt`, message: 'give exactly one of dueAt (RFC 3339 with an offset) or delayMs (milliseconds from now)' }
      : { instancePath: `${base}/${String(keys.find((k) => k !== 'dueAt' && k !== 'delayMs'))}`, message: 'unknown field' };
  }
  const branches = issue.params?.['errors'] as ZodIssueLike[][] | undefined;
  if (!Array.isArray(branches) || branches.length === 0) return issue;
  // Fewest issues wins; on a tie, prefer one that is not about a key the other branch has.
  const best = [...branches].sort((a, b) => a.length - b.length || Number(a[0]?.code === 'unrecognized_keys') - Number(b[0]?.code === 'unrecognized_keys'))[0]!;
  const first = best[0];
  if (!first) return issue;
  const dueKey = (i: ZodIssueLike | undefined) => i !== undefined && i.path.length === 1 && (i.path[0] === 'dueAt' || i.path[0] === 'delayMs');
  const neither = branches.every((b) => b.length === 1 && b[0]!.code === 'invalid_type' && dueKey(b[0]));
  if (first.code === 'unrecognized_keys' || neither) {
    return {
      instancePath: `${issue.instancePath.replace(/\/$/, '')}/dueAt`,
      message: 'give exactly one of dueAt (RFC 3339 with an offset) or delayMs (milliseconds from now)',
    };
  }
  const path = [issue.instancePath.replace(/\/$/, ''), ...first.path.map(String)].join('/');
  return closest({ keyword: first.code, instancePath: path, message: first.message, params: first as unknown as Record<string, unknown> });
}

/** The path parameters of the /v1/timeouts/{kind}/{bizId} routes, by path segment. */
const PATH_PARAMS: Record<number, string> = { 3: 'kind', 4: 'bizId' };

/** The path parameter of the segment `bad` picks in a /v1/timeouts/{kind}/{bizId} URL, if any. */
function pathParam(url: string, bad: (segment: string) => boolean): string | undefined {
  const segments = url.split('?')[0]!.split('/');
  if (segments[1] !== 'v1' || segments[2] !== 'timeouts') return undefined;
  return PATH_PARAMS[segments.findIndex(bad)];
}

function undecodable(segment: string): boolean {
  try {
    decodeURIComponent(segment);
    return false;
  } catch {
    return true;
  }
}

/** A path the router refused before any route ran, as a 400 naming the parameter: one it could
 *  not decode (a % not followed by two hex digits, or bytes that are not UTF-8, such as the
 *  encoded form of a lone surrogate), or one longer than the router takes (far over any bizId). */
function badPath(code: string, url: string): { status: number; body: ErrorBody } {
  const long = code === 'FST_ERR_MAX_PARAM_LENGTH';
  const field = pathParam(url, long ? (s) => s.length > MAX_PATH_PARAM : undecodable);
  const why = long
    ? `too long (a bizId is at most ${MAX_BIZ_ID} characters, a kind 100)`
    : 'not valid percent-encoded UTF-8 (a % must be followed by two hex digits, and the bytes must be UTF-8; a lone surrogate has no UTF-8 form)';
  return { status: 400, body: errorBody('invalid_request', `${field ? `${field}: ` : ''}${why} (in the path)`, field) };
}

/** The status and body for an error, or null when it is ours to log as a 500. `url`: the
 *  request's, to name the path parameter the router could not decode. */
export function toErrorAnswer(err: unknown, url = ''): { status: number; body: ErrorBody } | null {
  if (err instanceof ApiError) return { status: err.status, body: errorBody(err.code, err.message, err.field) };
  const code = (err as FastifyError).code;
  if (code === 'FST_ERR_BAD_URL' || code === 'FST_ERR_MAX_PARAM_LENGTH') return badPath(code, url);
  if (err instanceof InputError) return { status: 400, body: errorBody('invalid_request', err.message) };
  if (isConnectionError(err)) {
    return {
      status: 503,
      body: errorBody('unavailable', `the database connection was lost under this request (${(err as Error).message}); retry it: every call is safe to repeat`),
    };
  }
  const fe = err as FastifyError;
  if (hasZodFastifySchemaValidationErrors(fe)) {
    const first = closest(fe.validation[0]!);
    const field = first.instancePath.replace(/^\//, '').split('/').filter(Boolean).join('.');
    const where = fe.validationContext === 'params' ? 'the path' : fe.validationContext === 'querystring' ? 'the query' : 'the body';
    const message = `${field ? `${field}: ` : ''}${first.message} (in ${where})`;
    return { status: 400, body: errorBody('invalid_request', message, field || undefined) };
  }
  if (typeof fe.code === 'string' && FASTIFY[fe.code]) {
    const [status, code, message] = FASTIFY[fe.code]!;
    return { status, body: errorBody(code, message) };
  }
  // JSON.parse's own error as the content-type parser raises it.
  if (err instanceof SyntaxError && (fe.statusCode === 400 || /JSON/.test(err.message))) {
    return { status: 400, body: errorBody('malformed_json', `the body is not valid JSON: ${err.message}`) };
  }
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return { status: fe.statusCode, body: errorBody('invalid_request', fe.message) };
  }
  return null;
}
