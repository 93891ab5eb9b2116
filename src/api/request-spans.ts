// Each API request is a span (issue 33, docs/tracing.md), wired here once for every route rather
// than in each handler: a SERVER span named after the route template (`POST /v1/timeouts`),
// continuing the caller's `traceparent`, started in the first onRequest hook (so a request refused
// by authentication is a span too) and ended when the answer has gone out, with its status code
// and, on a 4xx/5xx, the answer's stable error code. The handler runs with the span active, so
// schedule() inside keeps the span's context with each timeout (sql/0022), and the batch statement
// likewise (backend.ts). The attributes name the method, route, path and token name: never a header
// value (the bearer token), a query string or a body.
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify';
import { startServerSpan, type ServerSpan } from '../observability/tracing.js';

const spans = new WeakMap<FastifyRequest, ServerSpan>();
const errorCodes = new WeakMap<FastifyRequest, string>();

/** The error code a request was answered with (the error and not-found handlers call it), for
 *  its span's `error.type`. */
export function noteErrorCode(req: FastifyRequest, code: string): void {
  errorCodes.set(req, code);
}

/** Registers the hooks; call it before any other hook and before the routes (onRoute sees only
 *  the routes declared after it). */
export function traceRequests(app: FastifyInstance): void {
  app.addHook('onRequest', (req, _reply, done) => {
    spans.set(
      req,
      startServerSpan(req.method, req.routeOptions.url, req.headers, {
        'url.scheme': 'http',
        'url.path': req.url.split('?', 1)[0]!,
      }),
    );
    done();
  });

  // Fastify runs a handler after the body has been read, in the async context of the socket's
  // last 'data'/'end' event, not the hook's: the span is made active around the handler itself.
  app.addHook('onRoute', (route) => {
    const handler = route.handler;
    route.handler = function (this: FastifyInstance, req: FastifyRequest, reply: FastifyReply) {
      const span = spans.get(req);
      return span ? span.run(() => handler.call(this, req, reply)) : handler.call(this, req, reply);
    } as RouteHandlerMethod;
  });

  app.addHook('onResponse', (req, reply, done) => {
    const span = spans.get(req);
    if (span) {
      if (req.apiToken) span.span.setAttribute('tc.api.token', req.apiToken.name);
      span.end(reply.statusCode, errorCodes.get(req));
    }
    done();
  });
  // The client went away before the answer: the span ends anyway, without a status code.
  app.addHook('onRequestAbort', (req, done) => {
    const span = spans.get(req);
    if (span) {
      span.span.setAttribute('tc.request.aborted', true);
      span.end(undefined);
    }
    done();
  });
}
