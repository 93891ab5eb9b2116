// The HTTP handler: one batched POST per shard, on the external path (the center's rows are not
// locked during the call). Every failure of the call itself is batch-level (BatchFailure): refused,
// DNS, time limit, any non-2xx status (5xx; 401/403/404, which a token or URL fix cures, not the
// rows; 429/503 with Retry-After honoured), a reply that is not the expected JSON. Only ids the
// service names as failed are row-level. Each POST carries an Idempotency-Key (shard id and
// attempt) so the service can drop a duplicate.
import { z } from 'zod';
import type { HandlerConfig } from '../config.js';
import { injectTraceHeaders, SpanKind, withSpan, type Span } from '../observability/tracing.js';
import { BatchFailure, HandlerTimeoutError, type HandlerResult, type ShardItem } from './handler-contract.js';

const bizId = z.union([z.string().min(1), z.number()]).transform(String);
const replySchema = z.object({
  applied: z.array(bizId),
  failed: z.array(z.object({ bizId, error: z.string() })).optional(),
});

export interface PostContext {
  kind: string;
  shardId: number;
  /** The shard's attempt (lease): with the shard id, the idempotency key. */
  attempt: number;
  signal: AbortSignal;
  timeLimitMs: number;
}

/** Retry-After: seconds or an HTTP date. */
function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  const s = Number(value);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** One POST of a shard's batch, under a client span whose context the request carries
 *  (`traceparent`, when tracing is on: docs/tracing.md). */
export function postShard(config: Extract<HandlerConfig, { type: 'http' }>, items: ShardItem[], ctx: PostContext): Promise<HandlerResult> {
  return withSpan(
    'POST',
    { 'http.request.method': 'POST', 'url.full': config.url, 'tc.kind': ctx.kind, 'tc.shard.id': ctx.shardId, 'tc.handler.items': items.length },
    (span) => post(config, items, ctx, span),
    { kind: SpanKind.CLIENT },
  );
}

async function post(config: Extract<HandlerConfig, { type: 'http' }>, items: ShardItem[], ctx: PostContext, span: Span): Promise<HandlerResult> {
  const limit = AbortSignal.timeout(ctx.timeLimitMs);
  const signal = AbortSignal.any([ctx.signal, limit]);
  let res: Response;
  let text: string;
  try {
    res = await fetch(config.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': `${ctx.shardId}-${ctx.attempt}`,
        ...config.headers,
        ...injectTraceHeaders({}),
      },
      body: JSON.stringify({ kind: ctx.kind, shardId: ctx.shardId, attempt: ctx.attempt, items }),
      signal,
    });
    span.setAttribute('http.response.status_code', res.status);
    text = await res.text();
  } catch (err) {
    if (limit.aborted || ctx.signal.aborted)
      throw new HandlerTimeoutError(`HTTP handler ${config.url} did not answer within its ${ctx.timeLimitMs} ms time limit`, undefined, { cause: err });
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new BatchFailure(`HTTP handler ${config.url} unreachable: ${cause?.code ?? ''} ${cause?.message ?? (err as Error).message}`.trim(), undefined, {
      cause: err,
    });
  }
  if (!res.ok) {
    const hint = res.status === 401 || res.status === 403 ? ' (check the credentials in handler.headers)' : res.status === 404 ? ' (check handler.url)' : '';
    throw new BatchFailure(`HTTP handler ${config.url} answered ${res.status}${hint}: ${text.slice(0, 300)}`, retryAfterMs(res.headers.get('retry-after')));
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new BatchFailure(`HTTP handler ${config.url} replied with something that is not JSON: ${text.slice(0, 200)}`);
  }
  const parsed = replySchema.safeParse(body);
  if (!parsed.success) {
    throw new BatchFailure(
      `HTTP handler ${config.url} replied ${text.slice(0, 200)}: expected {"applied": [bizId...], "failed": [{"bizId", "error"}]} (${parsed.error.issues[0]?.message ?? ''})`,
    );
  }
  return { applied: parsed.data.applied, failed: parsed.data.failed ?? [] };
}
