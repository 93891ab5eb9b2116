// The API's routes under /v1, each declared once with its zod schemas: Fastify validates with
// them, the serializer checks each answer against them, and @fastify/swagger writes them into the
// OpenAPI document. A route checks the token's kinds and verb before it touches a database: a call
// outside them is 403 and changes nothing.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiBackend } from './backend.js';
import { ApiError } from './errors.js';
import {
  batchRequest,
  batchResponse,
  cancelResponse,
  errorResponse,
  healthResponse,
  rescheduleRequest,
  rescheduleResponse,
  scheduledTimeout,
  scheduleRequest,
  settleResponse,
  timeoutParams,
  timeoutView,
  type Verb,
} from './schemas.js';
import { allows } from './tokens.js';

/** The error answers every route may give (the document lists them). */
const errors = {
  400: errorResponse,
  401: errorResponse,
  403: errorResponse,
  404: errorResponse,
  408: errorResponse,
  413: errorResponse,
  415: errorResponse,
  // A database connection lost under the request (terminated, or silent past databaseSilenceMs):
  // the next request gets a new connection.
  503: errorResponse,
  // Not the client's doing (the database refused a statement, a bug): the server log has it.
  500: errorResponse,
};

function authorize(req: FastifyRequest, verb: Verb, kind: string, field: string): void {
  const token = req.apiToken;
  if (token === null) return; // no tokens configured: loopback only (server.ts)
  if (!allows(token, verb, kind)) {
    throw new ApiError(403, 'forbidden', `token "${token.name}" may not ${verb} timeouts of kind ${kind}`, field);
  }
}

export function registerRoutes(root: FastifyInstance, backend: ApiBackend): void {
  const app = root.withTypeProvider<ZodTypeProvider>();

  app.route({
    method: 'POST',
    url: '/v1/timeouts',
    schema: {
      operationId: 'schedule',
      summary: 'Schedule one timeout',
      description:
        'Idempotent on (kind, bizId) exactly as schedule() is: scheduling a live timeout again moves a pending one to the new due time and payload (created: false); one a worker holds is left alone.',
      tags: ['timeouts'],
      body: scheduleRequest,
      response: { 200: scheduledTimeout, ...errors },
    },
    handler: async (req) => {
      backend.checkKind(req.body.kind, 'kind');
      authorize(req, 'schedule', req.body.kind, 'kind');
      return backend.schedule(req.body);
    },
  });

  app.route({
    method: 'POST',
    url: '/v1/timeouts/batch',
    schema: {
      operationId: 'scheduleBatch',
      summary: 'Schedule up to 5,000 timeouts in one transaction',
      description:
        'All or nothing: one statement in one database writes every timeout, or none (an error answers which one and why). Each timeout is idempotent as in schedule. A (kind, bizId) may appear once; a batch whose timeouts belong in different stores is refused (send one per store).',
      tags: ['timeouts'],
      body: batchRequest,
      response: { 200: batchResponse, ...errors },
    },
    handler: async (req) => {
      // Each kind checked at its first row (the answer names that row), not once per row.
      const allowed = new Set<string>();
      req.body.timeouts.forEach((t, i) => {
        if (allowed.has(t.kind)) return;
        backend.checkKind(t.kind, `timeouts.${i}.kind`);
        authorize(req, 'schedule', t.kind, `timeouts.${i}.kind`);
        allowed.add(t.kind);
      });
      return backend.scheduleBatch(req.body);
    },
  });

  app.route({
    method: 'GET',
    url: '/v1/timeouts/:kind/:bizId',
    schema: {
      operationId: 'getTimeout',
      summary: 'Read a timeout',
      description:
        'The live timeout of (kind, bizId), else the latest final one: state, outcome, due time, attempts, last error, and the shard and scan that hold or applied it.',
      tags: ['timeouts'],
      params: timeoutParams,
      response: { 200: timeoutView, ...errors },
    },
    handler: async (req) => {
      backend.checkKind(req.params.kind, 'kind');
      authorize(req, 'get', req.params.kind, 'kind');
      return backend.get(req.params.kind, req.params.bizId);
    },
  });

  app.route({
    method: 'POST',
    url: '/v1/timeouts/:kind/:bizId/cancel',
    schema: {
      operationId: 'cancel',
      summary: 'Cancel a pending timeout',
      description: 'cancelled: false when it came too late or there was nothing to cancel (as the SQL answers: no row). Call it before touching the order.',
      tags: ['timeouts'],
      params: timeoutParams,
      response: { 200: cancelResponse, ...errors },
    },
    handler: async (req) => {
      backend.checkKind(req.params.kind, 'kind');
      authorize(req, 'cancel', req.params.kind, 'kind');
      return backend.cancel(req.params.kind, req.params.bizId);
    },
  });

  app.route({
    method: 'POST',
    url: '/v1/timeouts/:kind/:bizId/reschedule',
    schema: {
      operationId: 'reschedule',
      summary: 'Move a pending timeout to a new due time',
      description: 'rescheduled: false when no pending timeout exists (a worker holds it, it is final, or none).',
      tags: ['timeouts'],
      params: timeoutParams,
      body: rescheduleRequest,
      response: { 200: rescheduleResponse, ...errors },
    },
    handler: async (req) => {
      backend.checkKind(req.params.kind, 'kind');
      authorize(req, 'reschedule', req.params.kind, 'kind');
      return backend.reschedule(req.params.kind, req.params.bizId, req.body);
    },
  });

  app.route({
    method: 'POST',
    url: '/v1/timeouts/:kind/:bizId/settle',
    schema: {
      operationId: 'settle',
      summary: 'Settle a timeout now (settle on read)',
      description:
        "Applies the timeout now with its kind's handler and guard if it is due and still pending, under the claim's row lock, and answers what happened.",
      tags: ['timeouts'],
      params: timeoutParams,
      response: { 200: settleResponse, ...errors, 501: errorResponse },
    },
    handler: async (req) => {
      backend.checkKind(req.params.kind, 'kind');
      authorize(req, 'settle', req.params.kind, 'kind');
      return backend.settle(req.params.kind, req.params.bizId);
    },
  });

  app.route({
    method: 'GET',
    url: '/v1/health',
    schema: {
      operationId: 'health',
      summary: "Readiness: the center's database answers",
      description: 'No token needed (nothing in the answer). 503 unavailable when the database does not answer within 2 s.',
      tags: ['meta'],
      security: [],
      response: { 200: healthResponse, 500: errorResponse, 503: errorResponse },
    },
    handler: async () => {
      await backend.ping();
      return { status: 'ok' as const };
    },
  });

  app.route({
    method: 'GET',
    url: '/v1/openapi.json',
    schema: {
      operationId: 'openapi',
      summary: 'This document (OpenAPI 3.1)',
      tags: ['meta'],
      security: [],
      response: { 200: z.record(z.string(), z.unknown()), 500: errorResponse },
    },
    handler: async () => root.swagger() as unknown as Record<string, unknown>,
  });
}
