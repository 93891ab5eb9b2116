// The HTTP API's request and response schemas, written once in zod: Fastify validates each request
// with them (fastify-type-provider-zod) and @fastify/swagger turns the same objects into the
// OpenAPI 3.1 document at /v1/openapi.json, from which the TypeScript client is generated
// (scripts/generate-api-client.ts). Nothing here connects or runs a query.
import { z } from 'zod';
import { SETTLE_OUTCOMES, type SettleOutcome } from '../settle/settle.js';
import { isStorablePayload, MAX_PAYLOAD_DEPTH, NOT_STORABLE, payloadProblem, STORABLE_TEXT } from '../storable-text.js';
import { predicateCheck } from './lean-check.js';

export { SETTLE_OUTCOMES, type SettleOutcome };

/** Most timeouts one batch request may schedule (one transaction). */
export const MAX_BATCH = 5000;
/** Largest request body accepted (bytes): a full batch of 5,000 with small payloads fits. */
export const DEFAULT_BODY_LIMIT = 4 * 1024 * 1024;
/** Longest bizId, in characters (Unicode code points), as the table's CHECK counts them. */
export const MAX_BIZ_ID = 200;
/** Longest path parameter the router takes, percent-encoded: 200 characters of four UTF-8 bytes
 *  each are 2,400 (find-my-way's default stops at 100); a longer one is refused before routing. */
export const MAX_PATH_PARAM = 4096;
/** Longest delay accepted (100 years, in ms): the due time stays a sane timestamptz. */
const MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000;

/** The verbs a token may be allowed, one per route family. */
export const VERBS = ['schedule', 'cancel', 'reschedule', 'get', 'settle'] as const;
export type Verb = (typeof VERBS)[number];

const kind = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[a-z0-9._:-]+$/, 'kind names are lower-case letters, digits and . _ : -')
  .meta({ description: 'The timeout kind, as declared under kinds: in the config (e.g. order.unpaid).', example: 'order.unpaid' });
// Every string the API hands to PostgreSQL is one it can store (src/storable-text.ts): a kind's
// pattern allows no other; a bizId and a payload are checked, so the answer is 400 naming the field.
const bizId = z
  .string()
  .min(1)
  .max(MAX_BIZ_ID)
  .regex(STORABLE_TEXT, NOT_STORABLE)
  .meta({
    description: `The business object the timeout is for: 1 to ${MAX_BIZ_ID} characters (Unicode code points), any but NUL (\\u0000) and lone UTF-16 surrogates, which PostgreSQL cannot store. In a path, percent-encoded UTF-8.`,
    example: '42',
  });
const payload = z
  .unknown()
  .check(
    predicateCheck(
      (v) => isStorablePayload(v),
      (v) => payloadProblem(v)!,
    ),
  )
  .optional()
  .meta({
    description: `Any JSON, handed to the kind's handler with the timeout (stored as jsonb): nested at most ${MAX_PAYLOAD_DEPTH} levels, no NUL (\\u0000) or lone UTF-16 surrogate in any string or key. Its size is bounded by the request body's: ${DEFAULT_BODY_LIMIT / 1024 / 1024} MiB by default (api.bodyLimitBytes), 413 body_too_large beyond.`,
  });

/** RFC 3339 with an explicit offset; four-digit years only (a year 10000 is refused). */
const dueAt = z.iso
  .datetime({ offset: true })
  .meta({ description: 'Absolute due time, RFC 3339 with an offset (e.g. 2026-01-01T12:00:00Z). Give this or delayMs.' });
const delayMs = z
  .number()
  .int()
  .min(0)
  .max(MAX_DELAY_MS)
  .meta({ description: "Due this many milliseconds after the database's now() (the center's clock, not yours). Give this or dueAt." });

const common = {
  kind,
  bizId,
  payload,
};

/** Exactly one of dueAt / delayMs, as two closed shapes (so the document states the rule too). */
function oneTimeout(id?: string) {
  const schema = z.union([z.strictObject({ ...common, dueAt }), z.strictObject({ ...common, delayMs })]);
  return id ? schema.meta({ id }) : schema;
}

export const scheduleRequest = oneTimeout('ScheduleRequest');
export type ScheduleRequest = z.output<typeof scheduleRequest>;

export const scheduledTimeout = z
  .object({
    id: z.number().int(),
    kind: z.string(),
    bizId: z.string(),
    dueAt: z.string().meta({ description: 'The due time the center stored (RFC 3339, UTC).' }),
    created: z.boolean().meta({
      description:
        'false: a live timeout of (kind, bizId) existed; a pending one was moved to the new due time and payload, one a worker holds was left alone.',
    }),
  })
  .meta({ id: 'ScheduledTimeout' });

export const batchRequest = z
  .strictObject({
    timeouts: z
      .array(oneTimeout())
      .min(1)
      .max(MAX_BATCH)
      .meta({ description: `1 to ${MAX_BATCH} timeouts, scheduled in one transaction: all of them or none. A (kind, bizId) may appear once.` }),
  })
  .meta({ id: 'BatchRequest' });
export type BatchRequest = z.output<typeof batchRequest>;

export const batchResponse = z
  .object({
    transaction: z.literal('all-or-nothing').meta({ description: 'The batch was one transaction: every timeout was written, or none.' }),
    count: z.number().int(),
    created: z.number().int().meta({ description: 'How many of them were new (the rest existed and were moved, as schedule does).' }),
    timeouts: z.array(scheduledTimeout).meta({ description: 'One per timeout sent, in the order sent.' }),
  })
  .meta({ id: 'BatchResponse' });

export const timeoutParams = z.strictObject({ kind, bizId });

export const rescheduleRequest = z.union([z.strictObject({ dueAt }), z.strictObject({ delayMs })]).meta({ id: 'RescheduleRequest' });

export const cancelResponse = z
  .object({
    cancelled: z.boolean().meta({
      description:
        'true: the pending timeout is cancelled and will never act. false: too late or nothing to cancel (a worker holds it, it is already final, or it was never scheduled); the payment guard decides.',
    }),
  })
  .meta({ id: 'CancelResponse' });

export const rescheduleResponse = z
  .object({
    rescheduled: z.boolean().meta({ description: 'true: the pending timeout moved. false: no pending timeout (a worker holds it, it is final, or none).' }),
  })
  .meta({ id: 'RescheduleResponse' });

export const STATES = ['pending', 'dispatched', 'done', 'cancelled', 'failed'] as const;

export const timeoutView = z
  .object({
    id: z.number().int(),
    kind: z.string(),
    bizId: z.string(),
    state: z.enum(STATES),
    outcome: z.string().nullable().meta({ description: 'For a done timeout: applied or skipped (the guard refused).' }),
    dueAt: z.string(),
    attempts: z.number().int(),
    lastError: z.string().nullable(),
    shardId: z.number().int().nullable().meta({ description: 'The shard that holds or applied it.' }),
    scanId: z.number().int().nullable().meta({ description: 'The scan (coordinator tick) of that shard.' }),
    store: z.string().nullable().meta({ description: "The store (business database) that holds it; null for the center's database." }),
    createdAt: z.string(),
    finishedAt: z.string().nullable(),
  })
  .meta({ id: 'Timeout' });
export type TimeoutView = z.output<typeof timeoutView>;

// What settle did: the one list of outcomes, src/settle/settle.ts's (sql timeout_center.settle).
// Only applied and skipped change anything.

export const settleResponse = z
  .object({
    outcome: z.enum(SETTLE_OUTCOMES).meta({
      description:
        "applied: the kind's handler applied it now; skipped: its guard refused (e.g. already paid); not_due; paused; limited (the kind at its caps); busy (a worker holds it); already_final: it is done, cancelled or failed already (state and result say how, shardId which shard applied it), nothing changed; not_found: no timeout of this kind and bizId was ever scheduled (or retention purged it); unsupported (its handler runs outside the database that holds it: left to the scan); failed (the handler raised: rolled back, left to the scan).",
    }),
    detail: z.string().optional().meta({ description: 'Why, in words.' }),
    state: z.string().optional().meta({ description: 'The timeout state after settle, when one was found.' }),
    result: z.enum(['applied', 'skipped']).optional().meta({
      description: 'For a done timeout (applied, skipped, already_final): whether its handler changed the object (applied) or its guard refused (skipped).',
    }),
    shardId: z
      .number()
      .int()
      .optional()
      .meta({ description: 'The shard that holds or applied it (busy, already_final); none for one settle applied in the database.' }),
  })
  .meta({ id: 'SettleResponse' });
export type SettleAnswer = z.output<typeof settleResponse>;

/** The stable codes of every error answer; the message is for people, the code for programs. */
export const ERROR_CODES = [
  'unauthenticated',
  'forbidden',
  'invalid_request',
  'malformed_json',
  'unsupported_media_type',
  'body_too_large',
  'request_timeout',
  'unknown_kind',
  'duplicate_in_batch',
  'batch_spans_stores',
  'unroutable',
  'not_found',
  'not_implemented',
  'unavailable',
  'internal',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export const errorResponse = z
  .object({
    error: z.object({
      code: z.enum(ERROR_CODES),
      message: z.string(),
      field: z.string().optional().meta({ description: 'The request field at fault, as a path (e.g. timeouts.3.dueAt).' }),
    }),
  })
  .meta({ id: 'Error' });
export type ErrorBody = z.output<typeof errorResponse>;

export const healthResponse = z.object({ status: z.literal('ok') });
