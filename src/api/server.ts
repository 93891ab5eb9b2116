// The HTTP API for business services (docs/api.md): Fastify, with every request and response
// schema written once in zod (schemas.ts). Fastify validates with them and @fastify/swagger turns
// the same objects into the OpenAPI 3.1 document served at /v1/openapi.json; routes.ts declares the
// routes. Here: the server's limits (body size, a body that never finishes), authentication
// (bearer tokens scoped to kinds and verbs, tokens.ts), and one error shape (errors.ts).
import { createServer } from 'node:http';
import { PassThrough } from 'node:stream';
import { finished } from 'node:stream/promises';
import swagger from '@fastify/swagger';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { jsonSchemaTransform, jsonSchemaTransformObject, serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { z } from 'zod';
import { isLoopback } from '../console/auth.js';
import { InputError } from '../input-error.js';
import type { ApiBackend } from './backend.js';
import { closeConnectionsInStages } from './close-in-stages.js';
import { ApiError, errorBody, toErrorAnswer } from './errors.js';
import { leanCheck, OK } from './lean-check.js';
import { noteErrorCode, traceRequests } from './request-spans.js';
import { registerRoutes } from './routes.js';
import { MAX_PAYLOAD_DEPTH } from '../storable-text.js';
import { DEFAULT_BODY_LIMIT, MAX_BATCH, MAX_BIZ_ID, MAX_PATH_PARAM } from './schemas.js';
import type { ApiToken, TokenTable } from './tokens.js';

export const API_VERSION = '1.0.0';

export interface ApiAppOptions {
  backend: ApiBackend;
  tokens: TokenTable;
  logger: Logger;
  bodyLimitBytes?: number;
  /** A request whose body has not fully arrived this long after it began is answered 408. */
  requestTimeoutMs?: number;
}

export interface ApiServerOptions extends ApiAppOptions {
  host: string;
  port: number;
  /** Serve without tokens on a non-loopback address (a proxy in front authenticates). */
  allowUnauthenticated?: boolean;
}

export interface ApiServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

export class ApiConfigError extends InputError {
  override name = 'ApiConfigError';
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The token the request carried (null: the API runs without tokens, on loopback only). */
    apiToken: ApiToken | null;
  }
}

/** zod validates each request (fastify-type-provider-zod), after a lean check compiled from the
 *  same schema (lean-check.ts): a value the lean check finds OK is one zod accepts as it is, and
 *  goes on without zod's copy; anything else goes to zod, whose answer (or error) stands. */
const leanValidatorCompiler: typeof validatorCompiler = (route) => {
  const zod = validatorCompiler(route);
  const lean = route.schema instanceof z.core.$ZodType ? leanCheck(route.schema) : null;
  if (!lean) return zod;
  return (data) => (lean(data) === OK ? { value: data } : zod(data));
};

/** Each answer is checked against its route's response schema before it is written: by the lean
 *  check when it can tell (the answer is already what zod would write), else by zod, which refuses
 *  an answer that does not match (a 500, never a body that breaks the document). */
const leanSerializerCompiler: typeof serializerCompiler = (route) => {
  const zod = serializerCompiler(route);
  const lean = route.schema instanceof z.core.$ZodType ? leanCheck(route.schema) : null;
  if (!lean) return zod;
  return (data) => (lean(data) === OK ? JSON.stringify(data) : zod(data));
};

/** Every error answer: the API's shape with its status (errors.ts); anything that is not the
 *  request's fault is 500 internal, logged at error level with its cause. */
function sendError(err: unknown, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const answer = toErrorAnswer(err, req.url);
  noteErrorCode(req, answer?.body.error.code ?? 'internal');
  if (answer) {
    if (answer.status === 401 || answer.status === 403)
      req.log.info({ route: req.routeOptions.url, token: req.apiToken?.name, code: answer.body.error.code }, 'api request refused');
    return reply.code(answer.status).send(answer.body);
  }
  req.log.error({ err, route: req.routeOptions.url }, 'api request failed');
  return reply.code(500).send(errorBody('internal', 'internal error (the server log has the details)'));
}

/** How far over the body limit a request is still read out before its 413 (see preParsing). */
const DRAIN_FACTOR = 4;

/** Reads a request body to its end and drops it; false if it did not end within ms (or failed). */
async function discard(payload: NodeJS.ReadableStream, ms: number): Promise<boolean> {
  payload.resume();
  return finished(payload, { signal: AbortSignal.timeout(ms) }).then(
    () => true,
    () => false,
  );
}

/** The Fastify app with every route, not yet listening (tests and the document generator use it
 *  with inject()/ready()). */
export async function buildApiApp(options: ApiAppOptions): Promise<FastifyInstance> {
  const requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
  const bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT;
  const app = Fastify({
    loggerInstance: options.logger.child({ component: 'api' }) as FastifyBaseLogger,
    // Each request is logged once, at debug, by the onResponse hook below (never its headers).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    // The server's own bound on a request that never completes (a backstop behind the body timer
    // below, which answers in the API's error shape); checked every 250 ms rather than Node's 30 s.
    serverFactory: (handler) => {
      const server = createServer(
        { requestTimeout: requestTimeoutMs + 2000, headersTimeout: requestTimeoutMs + 1000, connectionsCheckingInterval: 250, keepAliveTimeout: 5000 },
        handler,
      );
      closeConnectionsInStages(server, requestTimeoutMs);
      return server;
    },
    // A bizId is up to 200 characters, percent-encoded in the path (schemas.ts MAX_PATH_PARAM).
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: MAX_PATH_PARAM },
    // A path the router refuses (one it cannot decode, or longer than maxParamLength) is answered
    // before any hook or error handler: here, as every error is (errors.ts names the parameter).
    // The reply is typed for a route with no schema.
    frameworkErrors: (err, req, reply) => void sendError(err, req, reply as unknown as FastifyReply),
  });
  // First: each request's span starts before authentication and wraps every route's handler.
  traceRequests(app);
  app.setValidatorCompiler(leanValidatorCompiler);
  app.setSerializerCompiler(leanSerializerCompiler);
  app.decorateRequest('apiToken', null);
  // JSON only: any other body type is 415 (Fastify would hand a text/plain body to the schema).
  app.removeContentTypeParser('text/plain');

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'timeout-center API',
        version: API_VERSION,
        description:
          'Schedule, cancel, reschedule, read and settle timeouts over HTTP. Every call needs `Authorization: Bearer <token>`; a token is allowed a list of kinds and verbs. Errors are `{"error": {"code", "message", "field"}}` with a stable code. ' +
          `Limits: a kind is 1 to 100 characters, a bizId 1 to ${MAX_BIZ_ID} (Unicode code points; percent-encoded UTF-8 in a path); no string, payload keys and values included, may hold NUL (\\u0000) or a lone UTF-16 surrogate, which PostgreSQL cannot store; a payload nests at most ${MAX_PAYLOAD_DEPTH} levels; a batch holds 1 to ${MAX_BATCH.toLocaleString('en')} timeouts; a request body is at most ${DEFAULT_BODY_LIMIT / 1024 / 1024} MiB by default (api.bodyLimitBytes; 413 beyond). ` +
          'Anything over them is a 4xx naming the field, and changes nothing; 500 internal is never the request: the server log has it.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
    transformObject: jsonSchemaTransformObject,
  });

  // Authentication before the body is read: a caller without a valid token never gets to send one.
  app.addHook('onRequest', async (req) => {
    if (req.url === '/v1/openapi.json' || req.url === '/v1/health') return;
    const token = options.tokens.find(req.headers.authorization);
    if (token) {
      req.apiToken = token;
      return;
    }
    if (!options.tokens.enabled) return; // no tokens: allowed only on loopback (startApi)
    throw new ApiError(401, 'unauthenticated', req.headers.authorization ? 'the bearer token is not valid' : 'send Authorization: Bearer <token>');
  });

  // A body that has not arrived within the bound is answered 408, in the error shape, and the
  // connection is closed: a slow client cannot hold a request (or a database call) open. The timer
  // runs only while a body is expected and is cleared when the answer goes out, whatever it was.
  app.addHook('preParsing', async (req, reply, payload) => {
    const headers = req.headers;
    if (headers['content-length'] === undefined && headers['transfer-encoding'] === undefined) return payload;
    const declared = Number(headers['content-length']);
    if (declared > bodyLimit) {
      // Answered 413 either way. Fastify's parser would answer before reading and close the
      // connection. Read the body into the void first, up to four times the limit and within the
      // body's time bound, so the client may keep the connection; past that, answer at once and
      // close (in stages: close-in-stages.ts, so a client still sending reads the answer).
      if (declared > DRAIN_FACTOR * bodyLimit || !(await discard(payload, requestTimeoutMs))) reply.header('connection', 'close');
      throw new ApiError(413, 'body_too_large', `the request body is larger than the limit (${bodyLimit} bytes)`);
    }
    const out = new PassThrough();
    out.on('error', () => undefined); // reported to the parser (408 below); nothing else listens after the answer
    let ended = false;
    // Timers run before I/O in each turn of the event loop: after a stall of this process, bytes
    // that did arrive in time are still unread when the timer fires. setImmediate runs after the
    // I/O of that turn, so only a body that really has not come is answered 408.
    const timer = setTimeout(
      () =>
        setImmediate(() => {
          if (ended) return;
          reply.header('connection', 'close');
          out.destroy(new ApiError(408, 'request_timeout', `the request body did not arrive within ${requestTimeoutMs} ms`));
        }),
      requestTimeoutMs,
    );
    bodyTimers.set(req, timer);
    payload.on('error', (err) => out.destroy(err));
    payload.on('end', () => (ended = true));
    out.on('end', () => clearTimeout(timer));
    payload.pipe(out);
    return out;
  });
  const bodyTimers = new WeakMap<object, NodeJS.Timeout>();
  const clearBodyTimer = async (req: object) => clearTimeout(bodyTimers.get(req));
  app.addHook('onResponse', clearBodyTimer);
  app.addHook('onRequestAbort', clearBodyTimer);

  app.addHook('onResponse', async (req, reply) => {
    req.log.debug(
      { method: req.method, route: req.routeOptions.url, status: reply.statusCode, token: req.apiToken?.name, ms: Math.round(reply.elapsedTime) },
      'api request',
    );
  });

  app.setErrorHandler(sendError);
  app.setNotFoundHandler((req, reply) => {
    noteErrorCode(req, 'not_found');
    return reply.code(404).send(errorBody('not_found', `no such route: ${req.method} ${req.url.split('?')[0]}`));
  });

  registerRoutes(app, options.backend);
  await app.ready();
  return app;
}

/** Listens; refuses to serve without tokens on a non-loopback address unless told a proxy
 *  authenticates (the console's rule). */
export async function startApi(options: ApiServerOptions): Promise<ApiServer> {
  if (!options.tokens.enabled && !isLoopback(options.host) && !options.allowUnauthenticated) {
    throw new ApiConfigError(
      `refusing to serve the API on ${options.host} without tokens: configure api.tokens in the config file or TC_API_TOKENS, ` +
        'or bind a loopback address (--host 127.0.0.1), or pass --allow-unauthenticated if a proxy in front authenticates',
    );
  }
  const app = await buildApiApp(options);
  try {
    await app.listen({ host: options.host, port: options.port });
  } catch (err) {
    await app.close();
    const code = (err as NodeJS.ErrnoException).code;
    throw new ApiConfigError(
      `cannot serve the API on ${options.host}:${options.port}: ${code === 'EADDRINUSE' ? 'the port is in use' : (err as Error).message}`,
    );
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const hostForUrl = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${hostForUrl}:${port}`;
  options.logger.info({ url, auth: options.tokens.enabled ? 'tokens' : 'off' }, 'api listening');
  return {
    url,
    port,
    close: async () => {
      app.server.closeAllConnections();
      await app.close();
    },
  };
}
