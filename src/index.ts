// Public API for Node services: the business functions (schedule / cancel / reschedule / settle), tracing, and the
// pieces to embed a coordinator or worker in your own process.
export { schedule, cancel, reschedule, storeOf, TimeoutInputError, UnknownKindError } from './schedule.js';
export { StoreRouter } from './stores/store-router.js';
export { settle, SETTLE_OUTCOMES } from './settle/settle.js';
export { Settler } from './settle/settler.js';
export type { SettlerOptions } from './settle/settler.js';
export type { SettleOptions, SettleOutcome, SettleResult } from './settle/settle.js';
export { withSpan, withRequestSpan, activeTraceparent, injectTraceHeaders, tracingConfigured, SpanKind } from './observability/tracing.js';
export type { Span } from './observability/tracing.js';
export type { Executor, PgQueryable, ScheduleInput, ScheduledTimeout } from './schedule.js';
export { loadConfig, parseConfig, ConfigError } from './config.js';
export type { Config, ConfigInput, LoadedConfig, KindConfig } from './config.js';
export { startRuntime } from './runtime.js';
export type { Runtime, RuntimeOptions } from './runtime.js';
export { migrate } from './db/migrate.js';
export { PermanentError, BatchFailure } from './worker/handler-contract.js';
export type { ShardHandler, ShardItem, HandlerContext, HandlerResult } from './worker/handler-contract.js';
export type { ShardChannel, ShardMessage, ShardDelivery } from './transport/channel.js';
// The HTTP API's typed client (docs/api.md), generated from the served OpenAPI document.
export { createApiClient } from './api/client.js';
export type { ApiClient, ApiClientOptions, ApiPaths, ApiComponents } from './api/client.js';
export type { SettleFn } from './api/backend.js';
// The package's version (package.json), as `timeout-center --version` prints it.
export { VERSION } from './version.js';
