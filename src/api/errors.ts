// Every error answer of the HTTP API has one shape, {"error": {"code", "message", "field"?}}, with a
// stable code (schemas.ts ERROR_CODES) a program can branch on, and the request field at fault.
// This module turns whatever went wrong (Fastify's own errors for the body, the zod validation,
// an ApiError from a route, bad input from the business API) into that answer.
import type { FastifyError } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { InputError } from '../input-error.js';
import type { ErrorBody, ErrorCode } from './schemas.js';

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

/** The status and body for an error, or null when it is ours to log as a 500. */
export function toErrorAnswer(err: unknown): { status: number; body: ErrorBody } | null {
  if (err instanceof ApiError) return { status: err.status, body: errorBody(err.code, err.message, err.field) };
  if (err instanceof InputError) return { status: 400, body: errorBody('invalid_request', err.message) };
  const fe = err as FastifyError;
  if (hasZodFastifySchemaValidationErrors(fe)) {
    const first = fe.validation[0]!;
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
