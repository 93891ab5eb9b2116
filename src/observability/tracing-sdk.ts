// The OpenTelemetry SDK of tracing.ts, loaded (dynamic import) only when the OTEL_* variables
// configure tracing: a TracerProvider exporting over OTLP/HTTP (or what OTEL_TRACES_EXPORTER
// names), W3C trace-context and baggage propagation, async-hooks context. The exporter reads its
// endpoint, headers and timeout from the OTEL_EXPORTER_OTLP_* variables itself, the resource its
// service name from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (default "timeout-center"); its
// service.version is the package's.
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, TracerProvider, type SpanExporter } from '@opentelemetry/sdk-trace';
import { VERSION } from '../version.js';

export class TracingConfigError extends Error {
  override name = 'TracingConfigError';
}

/** The exporters OTEL_TRACES_EXPORTER names (default otlp): otlp (OTLP over HTTP) and console. */
function exportersFromEnv(env: NodeJS.ProcessEnv): SpanExporter[] {
  const names = (env.OTEL_TRACES_EXPORTER ?? 'otlp')
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter((e) => e && e !== 'none');
  return (names.length > 0 ? names : ['otlp']).map((name) => {
    if (name === 'otlp') return new OTLPTraceExporter();
    if (name === 'console') return new ConsoleSpanExporter();
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER: unknown exporter "${name}" (this build exports with otlp, over HTTP, or console)`);
  });
}

export interface Tracing {
  provider: TracerProvider;
  /** Exports what is buffered, then stops exporting. */
  shutdown(): Promise<void>;
}

export interface StartTracingOptions {
  env?: NodeJS.ProcessEnv;
  /** Instead of the exporters the environment names (tests: InMemorySpanExporter). */
  exporter?: SpanExporter;
  /** Export each span as it ends (tests) instead of in batches (default). */
  simple?: boolean;
}

/**
 * Registers the OpenTelemetry SDK globally: a TracerProvider exporting to OTLP over HTTP (or what
 * OTEL_TRACES_EXPORTER names), W3C trace-context and baggage propagation, async-hooks context.
 * Returns undefined, registering nothing, when the host process registered a provider already
 * (its own SDK serves the engine's spans then).
 */
export function startTracing(options: StartTracingOptions = {}): Tracing | undefined {
  const env = options.env ?? process.env;
  const exporters = options.exporter ? [options.exporter] : exportersFromEnv(env);
  const resource = defaultResource()
    .merge(resourceFromAttributes({ 'service.name': 'timeout-center', 'service.version': VERSION }))
    .merge(detectResources({ detectors: [envDetector] }));
  const provider = new TracerProvider({
    resource,
    spanProcessors: exporters.map((e) => (options.simple ? new SimpleSpanProcessor({ exporter: e }) : new BatchSpanProcessor({ exporter: e }))),
  });
  if (!trace.setGlobalTracerProvider(provider)) {
    void provider.shutdown();
    return undefined;
  }
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }));
  return {
    provider,
    shutdown: async () => {
      await provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}
