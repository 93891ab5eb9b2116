// Tracing (issue 33): OpenTelemetry spans through @opentelemetry/api, off unless configured by the
// standard variables (the SDK itself is set up by tracing-sdk.ts, loaded only then). The engine's code only ever calls the API (withSpan, links from stored trace
// contexts, the traceparent of the active span): with no SDK registered every span is the API's
// non-recording span and costs a few object allocations. startTracing() registers the SDK (a
// TracerProvider with the OTLP/HTTP exporter, W3C trace-context propagation, async-hooks context)
// when OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT says so; the exporter reads its
// endpoint, headers and timeout from the OTEL_EXPORTER_OTLP_* variables itself, and the resource its
// service name from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (default "timeout-center").
// docs/tracing.md lists the spans and shows a local collector.
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  isSpanContextValid,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';
import type { Logger } from 'pino';
import { BaseService } from '../service.js';
import type { Tracing } from './tracing-sdk.js';

export { SpanKind };
export type { Span, Link };

/** The engine's tracer: a proxy that records once an SDK is registered (here or by the host). */
const tracer = trace.getTracer('timeout-center');

/** Links a shard span carries at most (one per applied timeout that kept its schedule request's
 *  trace context): a span's links are kept in memory until it ends and exported with it. */
export const MAX_LINKS_PER_SPAN = 32;

export interface SpanOptions {
  kind?: SpanKind;
  links?: Link[];
  /** Start under this context instead of the active one. */
  parent?: Context;
}

/**
 * Runs fn inside a span named `name` (active for fn's async work, so spans fn starts are its
 * children), ends it when fn settles, and marks it failed with the error fn throws. For the API
 * server's requests too: withSpan(`${method} ${route}`, { 'http.request.method': method }, ...).
 */
export function withSpan<T>(name: string, attributes: Attributes, fn: (span: Span) => Promise<T>, options: SpanOptions = {}): Promise<T> {
  const spanOptions = { attributes, ...(options.kind !== undefined ? { kind: options.kind } : {}), ...(options.links ? { links: options.links } : {}) };
  return tracer.startActiveSpan(name, spanOptions, options.parent ?? context.active(), async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/**
 * One incoming HTTP request's span (SERVER), continuing the caller's trace when its headers carry
 * a traceparent: for the API server's routes, e.g. in Fastify
 * `handler: (req, reply) => withRequestSpan(req.method, '/v1/timeouts', req.headers, async (span) => ...)`.
 * schedule() called inside keeps this span's context with the timeout.
 */
export function withRequestSpan<T>(
  method: string,
  route: string,
  headers: Record<string, string | string[] | undefined>,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = propagation.extract(context.active(), headers);
  return withSpan(`${method} ${route}`, { 'http.request.method': method, 'http.route': route }, fn, { kind: SpanKind.SERVER, parent });
}

/** An incoming request's SERVER span whose start and end are two events (the API server's
 *  onRequest and onResponse hooks) rather than one callback: see startServerSpan. */
export interface ServerSpan {
  readonly span: Span;
  /** Runs fn with this span active: spans fn starts are its children, and schedule() inside
   *  keeps this span's context with the timeout. */
  run<T>(fn: () => T): T;
  /** Ends the span with the response's status; errorCode: the answer's stable error code
   *  (`error.type`), on a 4xx or 5xx. A 5xx marks the span failed (a 4xx is the caller's error,
   *  not the server's, as the HTTP semantic conventions have it). Once; later calls do nothing. */
  end(statusCode: number | undefined, errorCode?: string): void;
}

/**
 * Starts an incoming HTTP request's span (SERVER), continuing the caller's trace when its headers
 * carry a traceparent: named `<METHOD> <route>` after the route template (`POST /v1/timeouts`,
 * `GET /v1/timeouts/:kind/:bizId`), never the raw URL, or `<METHOD>` alone when no route matched.
 * The caller ends it (ServerSpan.end). Tracing off: a non-recording span, nothing extracted.
 */
export function startServerSpan(
  method: string,
  route: string | undefined,
  headers: Record<string, string | string[] | undefined>,
  attributes: Attributes = {},
): ServerSpan {
  const parent = propagation.extract(ROOT_CONTEXT, headers);
  const span = tracer.startSpan(
    route === undefined ? method : `${method} ${route}`,
    { kind: SpanKind.SERVER, attributes: { 'http.request.method': method, ...(route === undefined ? {} : { 'http.route': route }), ...attributes } },
    parent,
  );
  const active = trace.setSpan(parent, span);
  let ended = false;
  return {
    span,
    run: (fn) => context.with(active, fn),
    end: (statusCode, errorCode) => {
      if (ended) return;
      ended = true;
      if (span.isRecording() && statusCode !== undefined) {
        span.setAttribute('http.response.status_code', statusCode);
        if (errorCode !== undefined && statusCode >= 400) span.setAttribute('error.type', errorCode);
        if (statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: errorCode ?? String(statusCode) });
      }
      span.end();
    },
  };
}

/** Starts a child of the active span that the caller ends (span.end()): for a step that is not
 *  one callback (the shard's record: finish and commit). */
export function startSpan(name: string, attributes: Attributes = {}): Span {
  return tracer.startSpan(name, { attributes });
}

/** Sets attributes on the active span (none: nothing). */
export function setActiveAttributes(attributes: Attributes): void {
  const span = trace.getActiveSpan();
  if (span?.isRecording()) span.setAttributes(attributes);
}

/** Links the active span to stored traceparents (at most MAX_LINKS_PER_SPAN in all). */
export function addLinksToActive(traceparents: string[]): void {
  if (traceparents.length === 0) return;
  const span = trace.getActiveSpan();
  if (span?.isRecording()) span.addLinks(linksTo(traceparents));
}

/** Marks a span failed with an error (recorded as an exception event). */
export function failSpan(span: Span, err: unknown): void {
  if (!span.isRecording()) return;
  span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

/** Whether spans are recorded right now (an SDK is registered and samples the active trace):
 *  lets a caller skip work done only for a span's attributes or links. */
export function tracingActive(): boolean {
  return trace.getActiveSpan()?.isRecording() ?? false;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The W3C traceparent of the active span (`00-<trace id>-<span id>-<flags>`), or undefined when
 *  there is none: what schedule() keeps with a timeout. */
export function activeTraceparent(): string | undefined {
  const ctx = trace.getActiveSpan()?.spanContext();
  if (!ctx || !isSpanContextValid(ctx)) return undefined;
  return `00-${ctx.traceId}-${ctx.spanId}-${(ctx.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** A W3C traceparent as a span context (remote), or undefined when it is not one. */
export function parseTraceparent(value: string): SpanContext | undefined {
  const m = TRACEPARENT.exec(value.trim());
  if (!m) return undefined;
  const ctx: SpanContext = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED, isRemote: true };
  return isSpanContextValid(ctx) ? ctx : undefined;
}

/** Span links to stored traceparents, one per distinct context (a request that scheduled many
 *  timeouts is one link), at most MAX_LINKS_PER_SPAN; invalid ones dropped. */
export function linksTo(traceparents: Iterable<string | null | undefined>): Link[] {
  const links: Link[] = [];
  const seen = new Set<string>();
  for (const tp of traceparents) {
    if (links.length >= MAX_LINKS_PER_SPAN) break;
    if (!tp || seen.has(tp)) continue;
    seen.add(tp);
    const ctx = parseTraceparent(tp);
    if (ctx) links.push({ context: ctx, attributes: { 'tc.link': 'schedule' } });
  }
  return links;
}

/** Adds the active context's headers (traceparent, tracestate, baggage) to an outgoing request's
 *  headers. Nothing when no propagator is registered (tracing off). */
export function injectTraceHeaders(headers: Record<string, string>): Record<string, string> {
  propagation.inject(context.active(), headers);
  return headers;
}

/** Whether the environment asks for traces: OTEL_TRACES_EXPORTER naming an exporter other than
 *  none, or an OTLP endpoint set; never with OTEL_SDK_DISABLED=true. */
export function tracingConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter(Boolean);
  if (exporters.length > 0) return exporters.some((e) => e !== 'none');
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}

/** The runtime's first service: starts the SDK when the environment configures tracing (nothing
 *  otherwise), and at stop, last, exports what is buffered. */
export class TracingService extends BaseService {
  readonly name = 'tracing';
  private tracing: Tracing | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    super();
  }

  protected async onStart(): Promise<void> {
    if (!tracingConfigured(this.env)) return;
    // The SDK is loaded only when tracing is configured: off, the engine touches the API alone.
    const { startTracing } = await import('./tracing-sdk.js');
    this.tracing = startTracing({ env: this.env });
    if (this.tracing) {
      this.logger.info(
        { exporter: this.env.OTEL_TRACES_EXPORTER ?? 'otlp', endpoint: this.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? this.env.OTEL_EXPORTER_OTLP_ENDPOINT },
        'tracing: spans exported (OpenTelemetry)',
      );
    } else {
      this.logger.info('tracing: the host process registered an OpenTelemetry SDK; the engine records to it');
    }
  }

  protected async onStop(): Promise<void> {
    const tracing = this.tracing;
    this.tracing = undefined;
    await tracing?.shutdown();
  }
}
